"""`opsctl preflight --fabric` end to end: the real CLI against real sshd processes on loopback
(one per node of the simulated Slurm cluster), whose hardware tools are the hwsim simulators
(nvidia-smi, topo -m, dcgmi, ib_write_bw, all_reduce_perf, the InfiniBand sysfs tree) driven by
one simulated H200 state per node; pair tests really connect server and client over TCP; the
cross-node NCCL test goes through the real srun of the simulated cluster.

What it cannot prove (docs/fabric.md): real RDMA, real bandwidth, GPUDirect."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from preflight_samples import LSBLK, NVME
from sshlab import SshLab

from opsctl.hwsim import fabric_tools
from opsctl.hwsim.render_ib import write_sysfs_tree
from opsctl.hwsim.state import make_node, save, state_path
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
NODES = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
HCAS = [f"mlx5_{i}" for i in range(8)]


def _shim(path: Path, tool: str, env: str) -> None:
    path.write_text(
        f'#!/bin/sh\nexec env PYTHONPATH={REPO} {env} {sys.executable} -m opsctl.hwsim.tools {tool} "$@"\n'
    )
    path.chmod(0o755)


@pytest.fixture(scope="module")
def rig(tmp_path_factory, sim4: SimCluster):
    assert sim4.node_names[:4] == NODES
    root = tmp_path_factory.mktemp("fabric")
    hw = root / "hw"
    for n in NODES:
        save(make_node(n), state_path(hw, n))
    lab = SshLab(root / "ssh")
    try:
        for n in NODES:
            node = lab.add_node(n)
            shutil.rmtree(node.sysfs)
            write_sysfs_tree(make_node(n), node.sysfs)
            state = f"HWSIM_STATE={state_path(hw, n)}"
            for tool in ("nvidia-smi", "dcgmi", "ib_write_bw", "all_reduce_perf"):
                _shim(node.bin / tool, tool, state)
            for tool, sample in (("lsblk", LSBLK), ("nvme", NVME)):
                (node.bin / tool).write_text(f"#!/bin/sh\nexec cat {sample}\n")
                (node.bin / tool).chmod(0o755)
            lab.start(node)
        # srun runs the cross-node all_reduce_perf on this host, once per simulated node
        srun_bin = root / "srun-bin"
        srun_bin.mkdir()
        _shim(srun_bin / "all_reduce_perf", "all_reduce_perf", f"HWSIM_STATE_DIR={hw}")
        addresses = ", ".join(f'{n} = "127.0.0.1:{node.port}"' for n, node in lab.nodes.items())
        cfg = root / "opsctl.toml"
        cfg.write_text(
            f'[slurm]\nbackend = "cli"\nslurm_conf = "{sim4.slurm_conf}"\ncommand_timeout = 60\n'
            f'[audit]\nlog = "{root / "audit.jsonl"}"\n'
            f'[health]\nssh_key = "{lab.client_key}"\nssh_known_hosts = "{lab.known_hosts}"\n'
            f'ssh_timeout = 120\nssh_parallel = 8\nstate_file = "{root / "health-state.json"}"\n'
            f'decision_log = "{root / "decisions.jsonl"}"\n'
            '[preflight]\ngpu_count = 8\ngpu_model_substring = "H200"\ngpu_memory_mib_min = 140000\n'
            f"ib_hcas = {json.dumps(HCAS)}\nib_rate_gbps = 400\nnvme_data_min = 1\n"
            # no /dev/nvidia-nvswitch* on this host: the NVSwitch count is unit-tested only
            "fabric_nvswitches = 0\nfabric_srun_args = []\nfabric_nccl_timeout = 240\n"
            f"addresses = {{ {addresses} }}\n"
        )
        env = {"PATH": f"{srun_bin}:/usr/bin:/bin:/usr/sbin:/sbin"}
        yield cfg, hw, env
    finally:
        lab.close()


def preflight(rig, *args: str) -> subprocess.CompletedProcess[str]:
    cfg, _, env = rig
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(cfg), "preflight", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(REPO), "HOME": "/root", **env},
        cwd=REPO,
    )


def _doc(r: subprocess.CompletedProcess[str]) -> dict:
    assert r.stdout.strip(), r.stderr
    return json.loads(r.stdout)


def _problems(doc: dict) -> str:
    bad = [
        (n["node"], v["code"], v["status"], v["summary"])
        for n in doc["nodes"]
        for v in n["verdicts"]
        if v["status"] != "OK"
    ]
    fab = doc.get("fabric", {})
    return json.dumps(
        {"verdicts": bad, "links": fab.get("links"), "multinode": fab.get("multinode")}, indent=1
    )


def _verdicts(doc: dict, node: str) -> dict[str, dict]:
    (entry,) = [n for n in doc["nodes"] if n["node"] == node]
    return {v["code"]: v for v in entry["verdicts"]}


@pytest.fixture
def heal(rig):
    _, hw, _ = rig
    yield
    for n in NODES:
        fabric_tools.heal_fabric(state_path(hw, n))


def test_a_healthy_set_exits_0(rig, heal):
    r = preflight(rig, "gpu-[001-004]", "--fabric", "--json")
    doc = _doc(r)
    assert r.returncode == 0, _problems(doc) + r.stderr
    fab = doc["fabric"]
    assert fab["rounds"] == 2 and fab["retest_rounds"] == 0 and len(fab["pairs"]) == 4
    assert fab["links"] == [] and fab["node_rails"] == []
    assert fab["multinode"]["status"] == "OK" and fab["multinode"]["evidence"]["ranks"] == 32
    for node in NODES:
        v = _verdicts(doc, node)
        for code in (
            "fabric-ib-phys", "fabric-ib-rate", "fabric-ib-link-layer", "fabric-pkey", "fabric-sm-lid",
            "fabric-fw-mismatch", "fabric-nvlink-state", "fabric-gpu-hca-pairing", "fabric-pcie",
            "fabric-dcgm-diag", "fabric-nccl-node", "fabric-ib-write-bw",
        ):  # fmt: skip
            assert v[code]["status"] == "OK", (node, code, v[code]["summary"])
        pairing = v["fabric-gpu-hca-pairing"]["evidence"]["pairing"]
        assert pairing["mlx5_3"] == {"gpu": 3, "link": "PIX"}
    for pair in fab["pairs"]:
        assert all(rail["ok"] and rail["gbps"] > 380 for rail in pair["rails"].values())
    table = preflight(rig, "gpu-[001-002]", "--fabric")
    assert table.returncode == 0 and "fabric: OK" in table.stdout, table.stdout + table.stderr


def test_a_slow_rail_names_that_node_and_rail_and_exits_1(rig, heal):
    _, hw, _ = rig
    fabric_tools.apply_fabric_fault(state_path(hw, "gpu-002"), "slow_rail=mlx5_3,gbps=180")
    r = preflight(rig, "gpu-[001-004]", "--fabric", "--json")
    doc = _doc(r)
    assert r.returncode == 1, r.stderr
    assert doc["fabric"]["node_rails"] == ["gpu-002/mlx5_3"]
    bw = _verdicts(doc, "gpu-002")["fabric-ib-write-bw"]
    assert bw["status"] == "FAIL" and bw["evidence"]["rails"] == ["mlx5_3"]
    assert "mlx5_3 180 Gb/s" in bw["summary"]
    for node in ("gpu-001", "gpu-003", "gpu-004"):
        assert _verdicts(doc, node)["fabric-ib-write-bw"]["status"] == "OK"
    assert doc["fabric"]["links"] == []
    # the slow rail paces the ring: NCCL across the set fails too, without naming a node
    assert doc["fabric"]["multinode"]["status"] == "FAIL"


def test_a_bad_cable_between_two_healthy_nodes_is_that_link(rig, heal):
    _, hw, _ = rig
    fabric_tools.apply_fabric_fault(state_path(hw, "gpu-001"), "bad_cable,gbps=40", state_path(hw, "gpu-002"))
    r = preflight(rig, "gpu-[001-004]", "--fabric", "--json")
    doc = _doc(r)
    assert r.returncode == 1, r.stderr
    links = doc["fabric"]["links"]
    assert {(x["a"], x["b"], x["kind"]) for x in links} == {("gpu-001", "gpu-002", "link")}
    assert {x["rail"] for x in links} == set(HCAS)
    assert doc["fabric"]["node_rails"] == []
    for node in ("gpu-001", "gpu-002"):
        v = _verdicts(doc, node)
        assert v["fabric-ib-link"]["status"] == "WARN" and v["fabric-ib-write-bw"]["status"] == "OK"
    assert {n["node"]: n["status"] for n in doc["nodes"]}["gpu-003"] == "OK"


def test_nvlink_fabric_not_up_fails_that_node(rig, heal):
    _, hw, _ = rig
    fabric_tools.apply_fabric_fault(state_path(hw, "gpu-003"), "nvlink_fabric=In Progress")
    r = preflight(rig, "gpu-[003-004]", "--fabric", "--json")
    doc = _doc(r)
    assert r.returncode == 1
    v = _verdicts(doc, "gpu-003")
    assert (
        v["fabric-nvlink-state"]["status"] == "FAIL" and "In Progress" in v["fabric-nvlink-state"]["summary"]
    )
    assert (
        v["fabric-nccl-node"]["status"] == "FAIL"
        and "system not yet initialized" in v["fabric-nccl-node"]["summary"]
    )
    assert _verdicts(doc, "gpu-004")["fabric-nvlink-state"]["status"] == "OK"


def test_remediate_drains_the_slow_rail_node_through_the_health_policy(rig, heal, sim4: SimCluster):
    cfg, hw, _ = rig
    fabric_tools.apply_fabric_fault(state_path(hw, "gpu-004"), "slow_rail=mlx5_6,gbps=100")
    try:
        r = preflight(rig, "gpu-[001-004]", "--fabric", "--remediate", "--json")
        doc = _doc(r)
        assert r.returncode == 1, r.stderr
        rem = doc["remediation"]
        assert set(rem["failed"]) == {"gpu-004"} and rem["failed"]["gpu-004"].startswith("fabric-ib-write-bw")
        (drain,) = [d for d in rem["decisions"] if d["action"] == "drain"]
        assert drain["node"] == "gpu-004" and drain["result"] == "applied"
        out = subprocess.run(
            ["scontrol", "show", "node", "gpu-004"], capture_output=True, text=True, env=sim4.env, check=True
        ).stdout
        assert "Reason=opsctl:watch:launch-node-failed:fabric-ib-write-bw" in out
        audit = (cfg.parent / "audit.jsonl").read_text()
        assert "gpu-004" in audit
    finally:
        sim4.reset()


def test_remediate_needs_fabric_and_bad_config_is_one_line(rig, tmp_path):
    r = preflight(rig, "gpu-001", "--remediate")
    assert r.returncode == 2 and r.stderr.startswith("opsctl: error:") and "--fabric" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[preflight]\nfabric_pairing_link = "FAR"\n')
    _, _, env = rig
    r = subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(bad), "preflight", "gpu-001", "--fabric"],
        capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(REPO), **env},
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "fabric_pairing_link" in r.stderr
