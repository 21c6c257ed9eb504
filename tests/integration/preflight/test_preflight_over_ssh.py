"""`opsctl preflight` end to end: the real CLI against real sshd processes on loopback (one per
simulated node, whose tools print genuine outputs or mutated copies of them) and a real simulated
Slurm (munged, slurmctld, slurmd) whose nodes declare Gres=gpu:h200:8."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from preflight_samples import LSBLK, NVME, as_h200, h100_report, without_last_gpu
from sshlab import SshLab

from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration

PROFILE = (
    '[preflight]\ngpu_count = 8\ngpu_model_substring = "H200"\ngpu_memory_mib_min = 140000\n'
    'ib_hcas = ["mlx5_0"]\nib_rate_gbps = 400\nnvme_data_min = 1\n'
)


def _tool(path: Path, sample: Path) -> None:
    path.write_text(f"#!/bin/sh\nexec cat {sample}\n")
    path.chmod(0o755)


@pytest.fixture(scope="module")
def rig(tmp_path_factory, sim4: SimCluster):
    assert sim4.node_names[:4] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    root = tmp_path_factory.mktemp("preflight")
    lab = SshLab(root / "ssh")
    try:
        reports = root / "reports"
        reports.mkdir()
        (reports / "h200.txt").write_text(as_h200(h100_report()))
        (reports / "h200-gpu-gone.txt").write_text(without_last_gpu(as_h200(h100_report())))
        for name, report in (("gpu-001", "h200.txt"), ("gpu-002", "h200-gpu-gone.txt")):
            node = lab.add_node(name)  # the genuine mlx5_0 tree: ACTIVE at 400 Gb/s
            node.set_nvidia_smi(str(reports / report))
            _tool(node.bin / "lsblk", LSBLK)
            _tool(node.bin / "nvme", NVME)
            lab.start(node)
        lab.add_node("gpu-003")  # never started: unreachable
        other_key = root / "other_host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
        lab.start(lab.add_node("gpu-004", host_key=other_key))  # a key known_hosts does not have
        addresses = ", ".join(f'{n} = "127.0.0.1:{node.port}"' for n, node in lab.nodes.items())
        common = (
            f'[health]\nssh_key = "{lab.client_key}"\nssh_known_hosts = "{lab.known_hosts}"\n'
            "ssh_timeout = 60\nssh_parallel = 4\n"
            f"{PROFILE}addresses = {{ {addresses} }}\n"
        )
        cfg = root / "opsctl.toml"
        cfg.write_text(
            f'[slurm]\nbackend = "cli"\nslurm_conf = "{sim4.slurm_conf}"\ncommand_timeout = 60\n{common}'
        )
        # the same cluster, with a Slurm that nothing answers for
        dead = root / "dead-slurm.conf"
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dead.write_text(f"ClusterName=nowhere\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n")
        no_slurm = root / "no-slurm.toml"
        no_slurm.write_text(
            f'[slurm]\nbackend = "cli"\nslurm_conf = "{dead}"\ncommand_timeout = 20\n{common}'
        )
        yield cfg, no_slurm
    finally:
        lab.close()


def preflight(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(cfg), "preflight", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def verdicts(proc: subprocess.CompletedProcess[str], node: str) -> dict[str, str]:
    doc = json.loads(proc.stdout)
    (entry,) = [n for n in doc["nodes"] if n["node"] == node]
    return {v["code"]: v["status"] for v in entry["verdicts"]}


def test_a_healthy_node_passes(rig):
    cfg, _ = rig
    r = preflight(cfg, "gpu-001", "--json")
    assert r.returncode == 0, r.stderr
    assert verdicts(r, "gpu-001") == {
        "preflight-gpu-count": "OK",
        "preflight-gpu-model": "OK",
        "preflight-gpu-memory": "OK",
        "preflight-ib-hca": "OK",
        "preflight-ib-rate": "OK",
        "preflight-nvme": "OK",
        "preflight-slurm-gres": "OK",
    }
    table = preflight(cfg, "gpu-001")
    assert (
        table.returncode == 0 and "opsctl preflight" in table.stdout and "all checks passed" in table.stdout
    )


def test_a_missing_gpu_fails_the_count_and_slurms_gres(rig):
    cfg, _ = rig
    r = preflight(cfg, "gpu-002", "--json")
    assert r.returncode == 1, r.stderr
    failed = {c for c, s in verdicts(r, "gpu-002").items() if s == "FAIL"}
    assert failed == {"preflight-gpu-count", "preflight-slurm-gres"}
    node = json.loads(r.stdout)["nodes"][0]
    gres = next(v for v in node["verdicts"] if v["code"] == "preflight-slurm-gres")
    assert (gres["evidence"]["declared"], gres["evidence"]["seen"]) == (8, 7)


def test_an_unreachable_node_or_a_bad_host_key_is_unknown_exit_3_and_a_fail_wins(rig):
    cfg, _ = rig
    r = preflight(cfg, "gpu-[003-004]", "--json")
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    for node in doc["nodes"]:
        assert [(v["code"], v["status"]) for v in node["verdicts"]] == [("evidence", "UNKNOWN")]
    assert "host key" in doc["nodes"][1]["verdicts"][0]["summary"]
    both = preflight(cfg, "gpu-[001-003]", "--json")
    assert both.returncode == 1
    assert {n["node"]: n["status"] for n in json.loads(both.stdout)["nodes"]} == {
        "gpu-001": "OK",
        "gpu-002": "FAIL",
        "gpu-003": "UNKNOWN",
    }


def test_slurm_unreachable_makes_only_the_gres_check_unknown(rig):
    _, no_slurm = rig
    r = preflight(no_slurm, "gpu-001", "--json")
    assert r.returncode == 3, r.stderr
    got = verdicts(r, "gpu-001")
    assert got.pop("preflight-slurm-gres") == "UNKNOWN"
    assert set(got.values()) == {"OK"}


def test_usage_and_config_errors_are_one_line_exit_2(rig, tmp_path):
    cfg, _ = rig
    r = preflight(cfg, "gpu-[001-")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[preflight]\ngpu_count = "eight"\n')
    r = preflight(bad, "gpu-001")
    assert r.returncode == 2 and r.stderr.startswith("opsctl: error:") and len(r.stderr.splitlines()) == 1
    assert "preflight.gpu_count" in r.stderr
