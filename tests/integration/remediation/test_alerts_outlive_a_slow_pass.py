"""A pass that takes 12 s (six intervals) posts alerts that a real Alertmanager (Debian's package)
still lists as active half a minute after the pass ended, five times the three-interval floor of the
resolve window: the service stamps them when it sends them and gives them minutes, so a slow pass
never posts an alert that arrives already resolved.

The pass is the service's own run_pass with its real Alertmanager client; only the evaluation (the
part that reads Prometheus and Slurm) is replaced by one that takes 20 s and raises a storm."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from amlab import active_alerts, wait_until

from opsctl.health.service import HealthResult
from opsctl.remediation.loop import Remediator
from opsctl.remediation.policy import Decision
from opsctl.sim.cluster import free_ports

pytestmark = pytest.mark.integration  # about 45 s: a 12 s pass, then half a minute

PASS_SECONDS = 12.0
STILL_ACTIVE_AFTER = 30.0
NODES = "gpu-[020-023]"


def config(tmp_path: Path, alertmanager: str) -> Path:
    (prometheus_port,) = free_ports(1)  # nothing listens: the evaluation below never asks it
    path = tmp_path / "opsctl.toml"
    path.write_text(f"""
[slurm]
backend = "cli"
[prometheus]
url = "http://127.0.0.1:{prometheus_port}"
[audit]
log = "audit.jsonl"
[health]
nodes = "gpu-[020-023]"
state_file = "state.json"
decision_log = "decisions.jsonl"
[remediator]
interval = 2.0
metrics_address = ""
pause_file = "paused.json"
status_file = "status.json"
alertmanager_url = "{alertmanager}"
""")
    return path


def test_a_slow_pass_posts_alerts_alertmanager_lists_half_a_minute_later(alertmanager, tmp_path, monkeypatch):
    service = Remediator(str(config(tmp_path, alertmanager)))
    service.ctx = dataclasses.replace(service.ctx, slurm=None)  # no Slurm here: the pass reads none
    storm = Decision(NODES, "alert", "storm: gpu-xid:xid79 on 4 nodes at once", "storm")

    def slow_evaluate(*, shadow: bool) -> HealthResult:
        time.sleep(PASS_SECONDS)
        return HealthResult(reports=[], source="prometheus", generated_at=time.time(), decisions=[storm],
                            mode="apply")

    monkeypatch.setattr(service, "_evaluate", slow_evaluate)
    status = service.run_pass()
    ended = time.monotonic()
    assert status.ok and status.duration_s >= PASS_SECONDS
    assert service.metrics.registry.get_sample_value(
        "opsctl_remediator_alerts_sent_total", {"alertname": "OpsctlRemediationStorm"}) == 1

    def ours() -> list[dict[str, object]]:
        return [a for a in active_alerts(alertmanager) if a["labels"]["nodes"] == NODES]

    wait_until(ours, timeout=10)  # Alertmanager took it as active, not as already resolved
    time.sleep(max(0.0, ended + STILL_ACTIVE_AFTER - time.monotonic()))
    (alert,) = ours()
    assert alert["status"]["state"] == "active", alert
    assert alert["labels"]["alertname"] == "OpsctlRemediationStorm"
