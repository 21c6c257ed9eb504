"""The service's Alertmanager client against a real Alertmanager (Debian's package): alerts are
accepted with their labels, expire by themselves at endsAt, and a payload Alertmanager rejects is
not retried."""

from __future__ import annotations

import time

import pytest
from amlab import active_alerts, wait_until

from opsctl.errors import Unreachable
from opsctl.remediation.alerts import AlertmanagerClient, build_alerts
from opsctl.remediation.policy import Decision

pytestmark = pytest.mark.integration  # a few seconds


def test_alerts_are_accepted_and_resolve_by_themselves(alertmanager):
    client = AlertmanagerClient(alertmanager, timeout=5, attempts=3)
    decision = Decision("gpu-[010-013]", "alert", "storm: gpu-xid:xid79 on 4 nodes at once", "storm")
    # a resolve window of three seconds (the service's is minutes): the alert ends soon after the send
    client.send(build_alerts([decision], time.time(), 3.0, host="head-01", mode="apply"))
    assert client.tries == 1

    def ours() -> list[dict[str, object]]:
        return [a for a in active_alerts(alertmanager) if a["labels"]["nodes"] == "gpu-[010-013]"]

    (alert,) = wait_until(ours, timeout=10)
    assert alert["labels"] == {
        "alertname": "OpsctlRemediationStorm",
        "severity": "page",
        "code": "storm",
        "nodes": "gpu-[010-013]",
        "service": "opsctl-remediation",
    }
    assert alert["annotations"]["summary"] == decision.why
    # nobody re-sends it: Alertmanager resolves it at endsAt
    wait_until(lambda: not ours(), timeout=30, interval=0.5)


def test_a_rejected_payload_is_not_retried(alertmanager):
    client = AlertmanagerClient(alertmanager, timeout=5, attempts=3)
    now = time.time()
    (alert,) = build_alerts([Decision("gpu-001", "alert", "brake: x", "brake")], now, 15.0)
    alert["endsAt"], alert["startsAt"] = alert["startsAt"], alert["endsAt"]  # ends before it starts
    with pytest.raises(Unreachable, match="rejected the alerts: HTTP 400"):
        client.send([alert])
    assert client.tries == 1
