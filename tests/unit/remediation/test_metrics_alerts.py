"""The service's metrics (its own registry, read back in the exposition format) and the alerts
it builds for Alertmanager's v2 API."""

from __future__ import annotations

import re
import socket
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.errors import ConfigError, Unreachable
from opsctl.health.service import HealthResult
from opsctl.model import Node
from opsctl.remediation.alerts import AlertmanagerClient, alert_kind, build_alerts
from opsctl.remediation.metrics import RemediatorMetrics, brake_from_state
from opsctl.remediation.policy import Decision
from opsctl.slurm.states import normalize_state

NOW = 1_800_000_000.0


def samples(m: RemediatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(m.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def report(node: str, *verdicts: tuple[str, Status, int | None]) -> NodeReport:
    vs = [Verdict(code, status, node, gpu, f"{code} {status}") for code, status, gpu in verdicts]
    worst = max((v.status for v in vs), key=[Status.OK, Status.WARN, Status.UNKNOWN, Status.FAIL].index)
    return NodeReport(node, worst, vs)


def result(reports: list[NodeReport], decisions: list[Decision]) -> HealthResult:
    return HealthResult(
        reports=reports, source="prometheus", generated_at=NOW, decisions=decisions, mode="apply"
    )


def test_verdicts_per_node_and_code_follow_the_last_pass():
    m = RemediatorMetrics()
    first = result(
        [
            # per-GPU verdicts of one check roll up to the worst
            report(
                "gpu-001",
                ("gpu-xid", Status.FAIL, 3),
                ("gpu-xid", Status.OK, 4),
                ("ib-port", Status.OK, None),
            ),
            report("gpu-002", ("gpu-xid", Status.OK, None), ("gpu-temp", Status.WARN, 1)),
        ],
        [
            Decision(
                "gpu-001",
                "drain",
                "failing check",
                "gpu-xid",
                "opsctl:health:gpu-xid:xid 79",
                result="applied",
            ),
            Decision("gpu-002", "none", "warn"),
        ],
    )
    m.record_pass(first, NOW, 0.4, paused=False, refusal="")
    s = samples(m)
    check = "opsctl_remediator_check_status"
    assert s[(check, (("code", "gpu-xid"), ("node", "gpu-001"), ("status", "FAIL")))] == 1
    assert s[(check, (("code", "ib-port"), ("node", "gpu-001"), ("status", "OK")))] == 1
    assert s[(check, (("code", "gpu-temp"), ("node", "gpu-002"), ("status", "WARN")))] == 1
    assert (check, (("code", "gpu-xid"), ("node", "gpu-001"), ("status", "OK"))) not in s
    assert s[("opsctl_remediator_node_status", (("node", "gpu-001"), ("status", "FAIL")))] == 1
    drains = (
        "opsctl_remediator_actions_total",
        (("action", "drain"), ("code", "gpu-xid"), ("result", "applied")),
    )
    assert s[drains] == 1
    assert not any(k[0] == "opsctl_remediator_actions_total" and ("action", "none") in k[1] for k in s)
    assert s[("opsctl_remediator_last_success_timestamp_seconds", ())] == NOW
    assert s[("opsctl_remediator_passes_total", (("result", "ok"),))] == 1
    assert s[("opsctl_remediator_pass_duration_seconds_count", ())] == 1
    assert s[("opsctl_remediator_refused", (("reason", ""),))] == 0

    # next pass: gpu-001 is clean, gpu-002 has left the node set; its series go, counters stay
    second = result([report("gpu-001", ("gpu-xid", Status.OK, None))], [])
    m.record_pass(second, NOW + 15, 0.3, paused=True, refusal="coverage: no evidence for mounts")
    s = samples(m)
    assert s[(check, (("code", "gpu-xid"), ("node", "gpu-001"), ("status", "OK")))] == 1
    assert (check, (("code", "gpu-xid"), ("node", "gpu-001"), ("status", "FAIL"))) not in s
    assert not any(k[0] == check and ("node", "gpu-002") in k[1] for k in s)
    assert not any(k[0] == "opsctl_remediator_node_status" and ("node", "gpu-002") in k[1] for k in s)
    assert s[drains] == 1
    assert s[("opsctl_remediator_paused", ())] == 1
    assert s[("opsctl_remediator_refused", (("reason", "coverage: no evidence for mounts"),))] == 1
    assert ("opsctl_remediator_refused", (("reason", ""),)) not in s


def slurm_node(name: str, state: str) -> Node:
    """A node as the CLI backend reads it from scontrol's State= text."""
    base, flags = normalize_state(state)
    return Node(name, base, flags)


def slurm_states(m: RemediatorMetrics) -> dict[str, str]:
    out: dict[str, str] = {}
    for (name, labels), value in samples(m).items():
        if name == "opsctl_remediator_slurm_node_state":
            assert value == 1
            node = dict(labels)["node"]
            assert node not in out, f"{node} counted twice"
            out[node] = dict(labels)["state"]
    return out


def test_slurm_states_one_series_per_node_and_the_old_one_goes_when_it_changes():
    m = RemediatorMetrics()
    m.set_slurm_states([slurm_node("gpu-001", "IDLE"), slurm_node("gpu-002", "MIXED"),
                        slurm_node("gpu-003", "ALLOCATED+DRAIN"), slurm_node("gpu-004", "DOWN*")])
    assert slurm_states(m) == {
        "gpu-001": "idle", "gpu-002": "mixed", "gpu-003": "draining", "gpu-004": "down*"
    }
    # a pass later: gpu-001 drained, gpu-003's job ended, gpu-004 left the cluster
    m.set_slurm_states([slurm_node("gpu-001", "IDLE+DRAIN"), slurm_node("gpu-002", "MIXED"),
                        slurm_node("gpu-003", "IDLE+DRAIN")])
    assert slurm_states(m) == {"gpu-001": "drained", "gpu-002": "mixed", "gpu-003": "drained"}
    # Slurm unreadable: no state is shown as current
    m.set_slurm_states(None)
    assert slurm_states(m) == {}
    m.set_slurm_states([slurm_node("gpu-001", "IDLE")])
    assert slurm_states(m) == {"gpu-001": "idle"}


def test_every_remediator_metric_the_dashboards_and_alerts_query_is_exported():
    root = Path(__file__).resolve().parents[3]
    texts = [p.read_text() for p in sorted((root / "dashboards/grafana").glob("*.json"))]
    texts += [p.read_text() for p in sorted((root / "dashboards/alerts").glob("*.rules.yml"))]
    queried = {n for t in texts for n in re.findall(r"\bopsctl_remediator_[a-z_]+", t)}
    assert "opsctl_remediator_slurm_node_state" in queried
    m = RemediatorMetrics()
    m.set_slurm_states([slurm_node("gpu-001", "IDLE")])
    exported = {s.name for fam in text_string_to_metric_families(generate_latest(m.registry).decode())
                for s in fam.samples}
    exported |= {f.name for f in m.registry.collect()}  # families with no sample yet
    assert queried - exported == set()


def test_errors_are_counted_by_kind_and_each_service_has_its_own_registry():
    m = RemediatorMetrics()
    m.record_error("Unreachable", 0.05)
    m.record_error("Unreachable", 0.05)
    m.record_error("ConfigError", 0.01)
    s = samples(m)
    assert s[("opsctl_remediator_pass_errors_total", (("kind", "Unreachable"),))] == 2
    assert s[("opsctl_remediator_passes_total", (("result", "error"),))] == 3
    assert s[("opsctl_remediator_passes_total", (("result", "ok"),))] == 0
    assert samples(RemediatorMetrics())[("opsctl_remediator_passes_total", (("result", "error"),))] == 0


def test_brake_budget_from_the_state_file_drains():
    policy = PolicyConfig(max_drains=2, max_fraction=0.10, window_seconds=3600)
    drains = [{"node": "gpu-001", "time": NOW - 100}, {"node": "gpu-002", "time": NOW - 4000}]
    b = brake_from_state(drains, policy, partition_size=64, now=NOW)
    assert (b.limit, b.in_window, b.left) == (2, 1, 1)
    # a small partition: a tenth of 8 nodes rounds down, but the brake never stops at zero
    assert brake_from_state([], policy, partition_size=8, now=NOW).limit == 1
    full = brake_from_state(drains * 3, policy, partition_size=64, now=NOW)
    assert (full.in_window, full.left) == (3, 0)
    m = RemediatorMetrics()
    m.set_brake(b)
    s = samples(m)
    assert (s[("opsctl_remediator_brake_drains_left", ())], s[("opsctl_remediator_brake_limit", ())]) == (
        1,
        2,
    )


def test_metrics_are_served_over_http_and_a_taken_port_is_a_config_error():
    m = RemediatorMetrics()
    m.record_error("Unreachable", 0.1)
    server = m.serve("127.0.0.1", _free_port())
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b'opsctl_remediator_pass_errors_total{kind="Unreachable"} 1.0' in resp.read()
        with pytest.raises(ConfigError, match=f"remediator.metrics_address 127.0.0.1:{port}"):
            RemediatorMetrics().serve("127.0.0.1", port)
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("decision", "name", "severity", "code"),
    [
        (
            Decision("gpu-[001-004]", "alert", "storm: gpu-xid:xid79 on 4 nodes", "storm"),
            "OpsctlRemediationStorm",
            "page",
            "storm",
        ),
        (
            Decision("gpu-[005-006]", "alert", "brake: 2 failing node(s) not drained", "brake"),
            "OpsctlRemediationBrakeHeld",
            "ticket",
            "brake",
        ),
        (
            Decision("gpu-007", "alert", "drained twice for GPU-1234 within 7d", "escalated"),
            "OpsctlNodeEscalated",
            "page",
            "escalated",
        ),
        (
            Decision("gpu-[001-064]", "alert", "XIDs are last-value only", "coverage"),
            "OpsctlRemediationRefused",
            "page",
            "coverage",
        ),
        (
            Decision("gpu-009", "alert", "something new", "future-rule"),
            "OpsctlRemediationAlert",
            "ticket",
            "future-rule",
        ),
    ],
)
def test_alert_names_and_severities(decision, name, severity, code):
    assert alert_kind(decision) == code
    (alert,) = build_alerts(
        [decision, Decision("gpu-010", "drain", "x", "gpu-xid")], NOW, 15.0, host="head-01", mode="apply"
    )
    assert alert["labels"] == {
        "alertname": name,
        "severity": severity,
        "code": code,
        "nodes": decision.node,
        "service": "opsctl-remediation",
    }
    assert alert["annotations"]["summary"] == decision.why
    assert alert["annotations"]["source"] == "opsctl remediator on head-01 (apply mode)"
    starts = datetime.fromisoformat(alert["startsAt"]).timestamp()
    ends = datetime.fromisoformat(alert["endsAt"]).timestamp()
    # sent at NOW, it resolves by itself the resolve window (here 15 s) after the last send
    assert (starts, ends) == (NOW, NOW + 15.0)
    assert alert["endsAt"].endswith("Z")


def test_no_alert_decisions_send_nothing():
    assert build_alerts([Decision("gpu-001", "drain", "x", "gpu-xid")], NOW, 15.0) == []
    AlertmanagerClient("http://127.0.0.1:1").send([])  # nothing to send: no connection attempted


def test_an_unreachable_alertmanager_fails_after_bounded_attempts():
    client = AlertmanagerClient(f"http://127.0.0.1:{_free_port()}", timeout=1.0, attempts=3)
    alerts = build_alerts([Decision("gpu-001", "alert", "storm: x", "storm")], NOW, 15.0)
    with pytest.raises(Unreachable, match=r"unreachable after 3 attempt\(s\)"):
        client.send(alerts)
    assert client.tries == 3
