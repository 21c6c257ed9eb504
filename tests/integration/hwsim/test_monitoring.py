"""A simulated cluster with monitoring: real slurmctld/slurmd/munge, the emulated exporters and a
real Prometheus configured by the production roles, queried over its HTTP API."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from hwsim_helpers import eventually, query

from opsctl.errors import UsageError
from opsctl.hwsim.state import load, state_path
from opsctl.sim import monitoring
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration



def _pids_under(state_dir: Path) -> list[int]:
    """Live processes whose command line mentions the state directory (read from /proc, no pgrep)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if str(state_dir) in cmdline and stat[stat.rindex(")") + 2] not in "ZX":
            pids.append(int(proc.name))
    return pids


def test_eight_nodes_faults_and_clean_down(make_sim: Callable[[int], SimCluster]) -> None:
    sim = make_sim(8)
    info = monitoring.load_info(sim)
    assert info is not None
    url = info.prometheus_url
    # opsctl.toml now points at this Prometheus.
    assert tomllib.loads(sim.config_path.read_text())["prometheus"]["url"] == url

    temps = query(url, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temps) == 64
    # the labels production's series carry: dcgm-exporter's Hostname, and instance = the inventory
    # (Slurm) name the prometheus role gives every target; nothing only the sim adds
    assert {r["metric"]["Hostname"] for r in temps} == set(sim.node_names)
    assert all(r["metric"]["instance"] == r["metric"]["Hostname"] for r in temps)
    assert {r["metric"]["job"] for r in temps} == {"dcgm-exporter"}
    assert all("node" not in r["metric"] for r in temps)
    ib = query(url, "node_infiniband_state_id == 4")
    assert len(ib) == 64 and {r["metric"]["job"] for r in ib} == {"node"}
    assert {r["metric"]["instance"] for r in ib} == set(sim.node_names)
    # only the fields of the counters file the dcgm role renders for the pinned DCGM 3
    assert len(query(url, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")) == 64
    absent = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
              "DCGM_FI_DEV_RETIRED_DBE", 'DCGM_FI_DEV_GPU_TEMP{DCGM_FI_DRIVER_VERSION!=""}')  # fmt: skip
    for name in absent:
        assert query(url, name) == [], name
    # the repository's alert rules are loaded, as the role installs them
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=10) as resp:
        groups = {g["name"] for g in json.loads(resp.read())["data"]["groups"]}
    assert {"gpu-health", "infiniband-health"} <= groups

    # An XID on one GPU of one node shows in the per-XID count, and nowhere else (every other GPU
    # has dcgm-exporter's zero series, without an xid label).
    assert len(query(url, 'DCGM_EXP_XID_ERRORS_COUNT{xid=""} == 0')) == 64
    monitoring.inject(sim, "gpu-003", "xid=79,gpu=3")
    hits = eventually(lambda: query(url, "DCGM_EXP_XID_ERRORS_COUNT > 0"), "XID 79 scraped")
    got = [(r["metric"]["Hostname"], r["metric"]["gpu"], r["metric"]["xid"], r["value"][1]) for r in hits]
    assert got == [("gpu-003", "3", "79", "1")]

    # Dropped exporters: Prometheus marks both targets down and that node's series go stale.
    monitoring.inject(sim, "gpu-005", "exporter_down")
    exporters_down = 'up{job=~"node|dcgm-exporter"} == 0'
    down = eventually(lambda: len(r := query(url, exporters_down)) == 2 and r, "targets down")
    assert sorted((r["metric"]["job"], r["metric"]["instance"]) for r in down) == [
        ("dcgm-exporter", "gpu-005"), ("node", "gpu-005")
    ]  # fmt: skip
    eventually(lambda: len(query(url, "DCGM_FI_DEV_GPU_TEMP")) == 56, "stale series of gpu-005 gone")
    assert not query(url, 'DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-005"}')

    # Healing brings it back.
    monitoring.heal(sim, "gpu-005")
    eventually(lambda: len(query(url, 'up{job=~"node|dcgm-exporter"} == 1')) == 16, "all targets up again")
    # the remediation service's target is there, down until the service runs
    assert [r["metric"]["instance"] for r in query(url, 'up{job="opsctl-remediation"} == 0')] == [
        "sim-monitoring"
    ]

    # slurmd_stopped stops the node's real slurmd; heal starts it again.
    monitoring.inject(sim, "gpu-002", "slurmd_stopped")
    assert not sim.slurmd_running("gpu-002")
    assert load(state_path(monitoring.hw_dir(sim), "gpu-002")).slurmd_up is False
    monitoring.heal(sim, "gpu-002")
    assert sim.slurmd_running("gpu-002")

    # The CLI, as an operator runs a drill: `opsctl sim inject NODE FAULT`.
    done = subprocess.run(
        [sys.executable, "-m", "opsctl", "sim", "inject", "gpu-004", "ib_down=mlx5_1", "--state-dir",
         str(sim.state_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ib_down = 'node_infiniband_state_id{instance="gpu-004"} == 1'
    hits = eventually(lambda: query(url, ib_down), "mlx5_1 of gpu-004 down in Prometheus")
    assert [r["metric"]["device"] for r in hits] == ["mlx5_1"]
    assert len(query(url, "node_infiniband_state_id == 1")) == 1

    # Bad input changes nothing.
    with pytest.raises(UsageError):
        monitoring.inject(sim, "gpu-099", "xid=79")
    with pytest.raises(UsageError):
        monitoring.inject(sim, "gpu-001", "bogus")
    assert not load(state_path(monitoring.hw_dir(sim), "gpu-001")).faults

    state_dir = sim.state_dir
    assert len(_pids_under(state_dir)) >= 2 + 8  # exporter, prometheus, slurmctld, 8 slurmd, ...
    sim.down()
    assert _pids_under(state_dir) == []
    assert not sim.procs.alive("prometheus") and not sim.procs.alive("hwsim-exporter")


def test_sixty_four_nodes_serve_512_gpus(make_sim: Callable[[int], SimCluster]) -> None:
    sim = make_sim(64)
    info = monitoring.load_info(sim)
    assert info is not None
    temps = query(info.prometheus_url, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temps) == 512
    assert len({(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in temps}) == 512
    assert len({r["metric"]["UUID"] for r in temps}) == 512
    monitoring.inject(sim, "gpu-042", "gpu_missing=5")
    url = info.prometheus_url
    eventually(lambda: len(query(url, "DCGM_FI_DEV_GPU_TEMP")) == 511, "GPU 5 of gpu-042 gone")
