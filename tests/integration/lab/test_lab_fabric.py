"""`opsctl preflight --fabric` end to end on the machine lab: the host's opsctl reaches the GPU
machines over real SSH, reads their simulated InfiniBand sysfs trees, `nvidia-smi -q`/`topo -m`,
`dcgmi diag`, runs `all_reduce_perf` on each, and pair-tests every rail with the simulated
`ib_write_bw` whose server and client really meet over TCP between two machines on the lab's
bridge; Slurm (on the lab's head) says which machines are idle. A slow rail injected on one
machine with `opsctl lab inject` names that machine and rail and exits 1; a healthy lab exits 0;
`playbooks/acceptance.yml` accepts the healthy lab and refuses the faulty one.

Three GPU machines (the shared lab has three for this): with two nodes there is a single pair, a
slow rail fails it from both ends alike, and no pair test can tell which node is at fault (the run
FAILs with the pair unisolated; the last test shows it on a two-node subset). A third node gives
each node two partners, which is what isolation needs (opsctl/preflight/isolate.py).

What this cannot prove (docs/fabric.md): real RDMA, real bandwidth, GPUDirect, NVSwitches; the
across-nodes NCCL test is not run here (see LAB_FABRIC)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import GPU_NODES, Converged, RunningLab, playbook, run_guide_step

from opsctl.lab.lab import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(2400)]

NODES = GPU_NODES  # the shared lab's (conftest.py)
SLOW_NODE, SLOW_RAIL = "gpu-002", "mlx5_3"
# The lab's machines differ from an HGX board in ways the fabric judge would rightly fail; each
# line says why it is set here and nowhere else.
LAB_FABRIC = (
    # no /dev/nvidia-nvswitch* in the machines: the NVSwitch count is unit-tested only
    "fabric_nvswitches = 0\n"
    "fabric_pair_timeout = 180.0\n"  # 16 python3 processes per pair on a 2-core host
)
# The across-nodes all_reduce_perf runs through srun on the host (the machines' addresses come from
# `lab connect`'s slurm.conf) with the default fabric_srun_args, --mpi=pmix: the slurm role installs
# PMIx (libpmix-dev) on the machines, the bootstrap on the host.


@pytest.fixture(scope="module")
def config(lab: RunningLab, converged: Converged, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`opsctl lab connect`'s opsctl.toml (Slurm, SSH addresses and keys, [preflight] from the lab
    inventory's hw_expected) with the lab's fabric settings, once every GPU machine is idle."""
    assert converged.first.returncode == 0 and not converged.first.failed_hosts, converged.first.report()
    out = lab.opsctl("connect")
    toml = Path(out.stdout.split("OPSCTL_CONFIG=", 1)[1].split()[0])
    text = toml.read_text()
    assert "\n[preflight]\n" in text, text
    path = tmp_path_factory.mktemp("fabric") / "opsctl.toml"
    path.write_text(text.replace("\n[preflight]\n", "\n[preflight]\n" + LAB_FABRIC, 1))
    deadline, states = time.monotonic() + 300, ""
    while time.monotonic() < deadline:  # bounds the wait only; nothing is timed
        states = lab.ssh("head-01", "sinfo", "-h", "-N", "-o", "%N %t").stdout
        if sorted(states.split()) == sorted([*NODES, *["idle"] * len(NODES)]):
            return path
        time.sleep(3)
    reasons = lab.ssh("head-01", "sinfo", "-R").stdout
    raise AssertionError(f"GPU machines not all idle in Slurm:\n{states}\n{reasons}")


def preflight(lab: RunningLab, config: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(config), "preflight", *args, "--fabric", "--json"],
        env=lab.env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert proc.stdout.strip(), text
    return proc.returncode, json.loads(proc.stdout), text


def verdicts(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    return {n["node"]: {v["code"]: v for v in n["verdicts"]} for n in doc["nodes"]}


def problems(doc: dict[str, Any]) -> str:
    bad = [(n, c, v["status"], v["summary"]) for n, vs in verdicts(doc).items() for c, v in vs.items()
           if v["status"] != "OK"]  # fmt: skip
    fab = doc["fabric"]
    return json.dumps({"not OK": bad, "links": fab["links"], "multinode": fab["multinode"]}, indent=1)


@pytest.fixture
def slow_rail(lab: RunningLab) -> Iterator[None]:
    out = lab.opsctl("inject", SLOW_NODE, f"slow_rail={SLOW_RAIL}", "--json")
    assert json.loads(out.stdout)["active_faults"] == [f"slow_rail={SLOW_RAIL},gbps=180"]
    try:
        yield
    finally:
        healed = lab.opsctl("heal", SLOW_NODE, "--json")
        assert json.loads(healed.stdout)["active_faults"] == []


def test_a_healthy_lab_passes_the_fabric_acceptance(lab: RunningLab, config: Path) -> None:
    rc, doc, text = preflight(lab, config)
    assert rc == 0, problems(doc) + text[-1000:]
    fab = doc["fabric"]
    # three nodes, two partners each: every pair once, one pair per round (the third node waits)
    assert (fab["rounds"], fab["retest_rounds"]) == (3, 0)
    assert sorted(tuple(sorted((p["client"], p["server"]))) for p in fab["pairs"]) == [
        ("gpu-001", "gpu-002"), ("gpu-001", "gpu-003"), ("gpu-002", "gpu-003"),
    ]  # fmt: skip
    for p in fab["pairs"]:
        assert sorted(p["rails"]) == [f"mlx5_{i}" for i in range(8)]
        assert all(r["ok"] and r["gbps"] >= 360 for r in p["rails"].values()), p
    assert fab["node_rails"] == [] and fab["links"] == []
    # one all_reduce_perf across the three machines, launched by the host's srun on the lab's Slurm
    multi = fab["multinode"]
    assert multi["status"] == "OK" and multi["evidence"]["ranks"] == 8 * len(NODES), problems(doc)
    got = verdicts(doc)
    assert sorted(got) == NODES
    for node in NODES:
        for code in ("fabric-ib-phys", "fabric-ib-rate", "fabric-pkey", "fabric-sm-lid", "fabric-fw-mismatch",
                     "fabric-nvlink-state", "fabric-gpu-hca-pairing", "fabric-pcie", "fabric-dcgm-diag",
                     "fabric-nccl-node", "fabric-ib-write-bw"):  # fmt: skip
            assert got[node][code]["status"] == "OK", (node, code, got[node][code]["summary"])


def test_a_slow_rail_on_one_machine_names_that_machine_and_rail(
    lab: RunningLab, config: Path, slow_rail: None
) -> None:
    rc, doc, text = preflight(lab, config)
    assert rc == 1, problems(doc) + text[-2000:]
    fab = doc["fabric"]
    assert fab["node_rails"] == [f"{SLOW_NODE}/{SLOW_RAIL}"], problems(doc)
    assert fab["links"] == []
    got = verdicts(doc)
    bw = got[SLOW_NODE]["fabric-ib-write-bw"]
    assert bw["status"] == "FAIL" and bw["evidence"]["rails"] == [SLOW_RAIL], bw
    assert f"{SLOW_RAIL} 180 Gb/s with gpu-001, gpu-003" in bw["summary"], bw["summary"]
    failing = {(n, c) for n, vs in got.items() for c, v in vs.items() if v["status"] == "FAIL"}
    assert failing == {(SLOW_NODE, "fabric-ib-write-bw")}, problems(doc)
    # the ring across all three machines is paced by the slow rail: the set fails as a whole too
    assert fab["multinode"]["status"] == "FAIL", problems(doc)
    # only that rail, only the pairs with that node
    for p in fab["pairs"]:
        bad = sorted(r for r, x in p["rails"].items() if not x["ok"])
        assert bad == ([SLOW_RAIL] if SLOW_NODE in (p["client"], p["server"]) else []), p


def test_acceptance_playbook_accepts_the_healthy_lab_and_refuses_the_slow_rail(
    lab: RunningLab, config: Path, tmp_path: Path
) -> None:
    # docs/getting-started.md, step 7, as written: `opsctl preflight`, then the playbook, which
    # keeps its report under acceptance-reports/ in the repository
    reports = REPO_ROOT / "acceptance-reports"
    before = set(reports.glob("acceptance-*.json"))
    steps = run_guide_step(lab, "acceptance", env={"OPSCTL_CONFIG": str(config)})
    assert [r.returncode for r in steps] == [0, 0], "\n".join(r.output[-3000:] for r in steps)
    assert not steps[1].failed_hosts and "localhost" in steps[1].recap, steps[1].output[-4000:]
    (report,) = set(reports.glob("acceptance-*.json")) - before
    assert json.loads(report.read_text())["status"] == "OK"
    report.unlink()
    # the refusal, with the report kept out of the repository
    opsctl = str(Path(sys.executable).parent / "opsctl")
    args = ["-e", f"acceptance_opsctl={opsctl}", "-e", f"acceptance_config={config}",
            "-e", f"acceptance_report_dir={tmp_path / 'reports'}"]  # fmt: skip
    lab.opsctl("inject", SLOW_NODE, f"slow_rail={SLOW_RAIL}")
    try:
        bad = playbook(lab, "playbooks/acceptance.yml", *args, env=lab.env)
    finally:
        lab.opsctl("heal", SLOW_NODE)
    assert bad.returncode != 0 and bad.failed_hosts == ["localhost"], bad.output[-4000:]
    assert f"nodes not accepted: {SLOW_NODE}" in bad.output, bad.output[-4000:]


def test_two_nodes_alone_fail_but_cannot_name_the_node(
    lab: RunningLab, config: Path, slow_rail: None
) -> None:
    """The default lab's two GPU machines: one pair, failing from both ends; nobody is convicted."""
    rc, doc, text = preflight(lab, config, "gpu-[001-002]")
    assert rc == 1, problems(doc) + text[-2000:]
    fab = doc["fabric"]
    assert fab["node_rails"] == [] and fab["retest_rounds"] == 0
    assert [(x["a"], x["b"], x["rail"], x["kind"]) for x in fab["links"]] == [
        ("gpu-001", "gpu-002", SLOW_RAIL, "unisolated")
    ]
    got = verdicts(doc)
    for node in ("gpu-001", "gpu-002"):
        assert got[node]["fabric-ib-pair"]["status"] == "UNKNOWN"
        assert got[node]["fabric-ib-write-bw"]["status"] == "OK"  # not convicted, and it says why
        assert f"{SLOW_RAIL} failed" in got[node]["fabric-ib-write-bw"]["summary"]


def test_healed_lab_passes_again(lab: RunningLab, config: Path) -> None:
    rc, doc, text = preflight(lab, config)
    assert rc == 0, problems(doc) + text[-2000:]
