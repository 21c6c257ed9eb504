"""An alert fired by an injected fault reaches Alertmanager, through the production configuration:
the prometheus role's prometheus.yml (its alerting section and the shipped rules) and the
alertmanager role's alertmanager.yml (its routes), on the simulated cluster with Debian's
Prometheus and Alertmanager."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opsctl.sim import monitoring
from opsctl.sim.addons import register_addon
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration  # about a minute on 2 cores

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "prometheus", "prometheus-alertmanager")
ADDON = "monitoring-with-alertmanager"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    register_addon(ADDON, lambda: monitoring.MonitoringAddon(alertmanager=True))
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="alrt", dir="/tmp"))
    cluster = SimCluster(nodes=2, state_dir=state_dir, addons=[ADDON])
    try:
        yield cluster.up()
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


def alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=10) as resp:
        found: list[dict[str, Any]] = json.loads(resp.read())
    return found


def test_an_injected_xid_79_reaches_alertmanager_routed_by_severity(sim: SimCluster) -> None:
    info = monitoring.load_info(sim)
    assert info is not None and info.alertmanager_url
    assert alerts(info.alertmanager_url) == []  # a healthy cluster: nothing
    monitoring.inject(sim, "gpu-002", "xid=79,gpu=6")
    deadline = time.monotonic() + 90
    fired: list[dict[str, Any]] = []
    while not fired and time.monotonic() < deadline:
        fired = [a for a in alerts(info.alertmanager_url) if a["labels"]["alertname"] == "GpuFatalXid"]
        time.sleep(2)
    assert fired, "GpuFatalXid never reached Alertmanager"
    (alert,) = fired
    labels = alert["labels"]
    assert (labels["Hostname"], labels["gpu"], labels["xid"]) == ("gpu-002", "6", "79")
    assert labels["severity"] == "critical" and labels["cluster"] == "sim"  # the external label
    assert alert["annotations"]["summary"] == "GPU 6 on gpu-002 raised XID 79"
    # the role's routes: a severity that is neither page nor ticket goes to the ticket receiver
    assert [r["name"] for r in alert["receivers"]] == ["ticket"]
    # the other node raised nothing
    assert not [a for a in alerts(info.alertmanager_url) if a["labels"].get("Hostname") == "gpu-001"]
