"""What opsctl sees depends on the counters file dcgm-exporter is given, on the simulated cluster
with its real Prometheus and real slurmctld:

- with the file the dcgm role ships (rendered for the pinned DCGM), `opsctl health` finds an
  injected XID 79 through the per-XID count (DCGM_EXP_XID_ERRORS_COUNT);
- with the same file lacking that count, opsctl says its XIDs are known by their last value only,
  and `opsctl health --remediate` refuses to act (exit 2, "remediation refused"), draining nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hwsim_helpers import eventually
from hwsim_helpers import query as prometheus_query

from opsctl.hwsim.metrics import XID_COUNT
from opsctl.sim import monitoring
from opsctl.sim.addons import register_addon
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration  # about 2 minutes on 2 cores: two 2-node clusters in turn

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "prometheus")
LACKING_ADDON = "monitoring-without-xid-count"



@pytest.fixture
def start_sim() -> Iterator[Callable[[str], SimCluster]]:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    started: list[tuple[SimCluster, Path]] = []

    def start(addon: str) -> SimCluster:
        # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
        state_dir = Path(tempfile.mkdtemp(prefix="ctr", dir="/tmp"))
        sim = SimCluster(nodes=2, state_dir=state_dir, addons=[addon])
        started.append((sim, state_dir))
        sim.up()
        # a fresh policy state per cluster; stale_after above the 5 s scrape interval
        sim.set_config(
            "health",
            stale_after=15.0,
            window_seconds=60,
            state_file=str(state_dir / "health-state.json"),
            decision_log=str(state_dir / "health-decisions.jsonl"),
        )
        return sim

    yield start
    for sim, state_dir in started:
        try:
            sim.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


def opsctl(sim: SimCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(sim.config_path), "health", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=sim.env,
        check=False,
    )


def query(sim: SimCluster, promql: str) -> list[dict[str, Any]]:
    info = monitoring.load_info(sim)
    assert info is not None
    return prometheus_query(info.prometheus_url, promql)


def xid_verdicts(doc: dict[str, Any], node: str) -> list[dict[str, Any]]:
    (entry,) = [n for n in doc["nodes"] if n["node"] == node]
    return [v for v in entry["verdicts"] if v["code"] == "gpu-xid"]


def test_shipped_counters_find_xid_79_through_the_count(start_sim: Callable[[str], SimCluster]) -> None:
    sim = start_sim("monitoring")
    info = monitoring.load_info(sim)
    assert info is not None
    rows = [line.split(",")[0] for line in Path(info.counters_file).read_text().splitlines()]
    assert XID_COUNT in rows  # the file the dcgm role renders for the pinned DCGM
    cov = opsctl(sim, "--coverage", "--json")
    assert cov.returncode == 0, cov.stderr
    assert json.loads(cov.stdout)["xid_modes"] == {"count": sim.node_names}

    monitoring.inject(sim, "gpu-002", "xid=79,gpu=2")
    eventually(lambda: query(sim, f'{XID_COUNT}{{Hostname="gpu-002",gpu="2",xid="79"}} == 1'), "XID counted")
    done = eventually(lambda: (p := opsctl(sim, "--json")).returncode == 1 and p, "health FAILs gpu-002")
    doc = json.loads(done.stdout)
    (verdict,) = [v for v in xid_verdicts(doc, "gpu-002") if v["status"] != "OK"]
    assert verdict["status"] == "FAIL" and verdict["gpu"] == 2
    assert "xid 79" in verdict["summary"] and "[XID counts over the exporter's window]" in verdict["summary"]
    assert all(v["status"] == "OK" for v in xid_verdicts(doc, "gpu-001"))


def test_without_the_count_health_is_last_value_and_remediation_refuses(
    start_sim: Callable[[str], SimCluster], tmp_path: Path
) -> None:
    # the shipped file (its golden copy is the role's render, tests/unit/ansible/test_dcgm_role.py)
    shipped = (Path(__file__).resolve().parents[2] / "golden/production/dcgm-counters.csv").read_text()
    lacking = tmp_path / "counters-without-xid-count.csv"
    lacking.write_text("".join(line for line in shipped.splitlines(True) if not line.startswith(XID_COUNT)))
    register_addon(LACKING_ADDON, lambda: monitoring.MonitoringAddon(counters_file=lacking))
    sim = start_sim(LACKING_ADDON)
    assert query(sim, XID_COUNT) == [] and len(query(sim, "DCGM_FI_DEV_XID_ERRORS")) == 16

    cov = opsctl(sim, "--coverage")
    assert cov.returncode == 0, cov.stderr
    assert "last-value" in cov.stdout  # opsctl says how it knows the XIDs
    doc = json.loads(opsctl(sim, "--coverage", "--json").stdout)
    assert doc["xid_modes"] == {"last-value": sim.node_names} and doc["last_value_xids"] is True

    monitoring.inject(sim, "gpu-001", "xid=79,gpu=0")
    eventually(lambda: query(sim, 'DCGM_FI_DEV_XID_ERRORS{Hostname="gpu-001",gpu="0"} == 79'), "last XID 79")
    refused = opsctl(sim, "--remediate")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "remediation refused" in refused.stderr and "known only by their last value" in refused.stderr
    assert refused.stderr.count("\n") == 1  # one line, no traceback
    # nothing drained: both nodes idle in the real slurmctld, no opsctl drain reason anywhere
    assert sim.sinfo_states() == {"gpu-001": "idle", "gpu-002": "idle"}
    reasons = subprocess.run(
        ["sinfo", "-h", "-N", "-R", "-o", "%N|%E"], env=sim.env, capture_output=True, text=True, check=True
    ).stdout
    assert "opsctl" not in reasons
