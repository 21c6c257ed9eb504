"""The alerts a pass posts are stamped when they are sent, not when the pass began, and stay active
minutes after the send. A pass can take far longer than its interval (an SSH source on a large
fleet, a slow slurmctld); an alert whose endsAt is the pass start plus a few intervals reaches
Alertmanager already ended, and nobody is told. The clock here is loop.py's own (a fake one), so a
20 s pass takes no time."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from remediator_config import free_port, write_config

from opsctl.health.service import HealthResult
from opsctl.remediation import loop
from opsctl.remediation.loop import Remediator
from opsctl.remediation.policy import Decision

NOW = 1_800_000_000.0
STORM = Decision("gpu-[001-004]", "alert", "storm: gpu-xid:xid79 on 4 nodes at once", "storm")


class Clock:
    """time.time and time.monotonic for loop.py: they move only when the test says so."""

    def __init__(self, t: float) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t


class Recorder:
    """Stands in for the Alertmanager client: keeps every payload sent."""

    def __init__(self) -> None:
        self.sent: list[list[dict[str, Any]]] = []

    def send(self, alerts: list[dict[str, Any]]) -> None:
        self.sent.append(alerts)


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def service_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock, remediator: str,
                 pass_seconds: float) -> tuple[Remediator, Recorder, list[list[Decision]]]:
    """A service whose passes take ``pass_seconds`` on ``clock`` and decide what the test puts in
    the returned list (one entry per pass, the last one repeated); its alerts go to a Recorder."""
    alertmanager = f'alertmanager_url = "http://127.0.0.1:{free_port()}"'
    config = write_config(tmp_path, remediator=f'metrics_address = ""\n{alertmanager}\n{remediator}')
    monkeypatch.setattr(loop, "time", clock)  # loop.py's clock only
    service = Remediator(str(config))
    service.ctx = dataclasses.replace(service.ctx, slurm=None)  # no Slurm here: the pass reads none
    recorder = Recorder()
    service.alerts = recorder  # type: ignore[assignment]
    plan: list[list[Decision]] = []

    def slow_evaluate(*, shadow: bool) -> HealthResult:
        clock.t += pass_seconds
        decisions = plan.pop(0) if len(plan) > 1 else plan[0]
        return HealthResult(reports=[], source="prometheus", generated_at=clock.t, decisions=decisions,
                            mode="apply")

    monkeypatch.setattr(service, "_evaluate", slow_evaluate)
    return service, recorder, plan


def test_a_20s_pass_posts_alerts_that_end_minutes_after_the_post(tmp_path, monkeypatch):
    clock = Clock(NOW)
    # the default interval (15 s): the pass takes longer than one
    service, recorder, plan = service_with(tmp_path, monkeypatch, clock, "", pass_seconds=20.0)
    plan.append([STORM])
    assert service.run_pass().ok
    posted = NOW + 20.0  # the pass ended, then its alerts were sent
    (alert,) = recorder.sent[0]
    assert epoch(alert["startsAt"]) == posted  # stamped at the send, not at the pass start
    window = epoch(alert["endsAt"]) - posted
    assert 3 * 60 <= window <= 15 * 60, f"the alert resolves {window:.0f}s after it was sent"

    # the condition still holds on the next pass: the alert is sent again, its end moved on
    clock.t += 2.0
    assert service.run_pass().ok
    (again,) = recorder.sent[1]
    assert epoch(again["startsAt"]) == posted + 22.0
    assert epoch(again["endsAt"]) == posted + 22.0 + window
    assert again["labels"] == alert["labels"]


def test_the_resolve_window_is_a_setting_and_never_under_three_intervals(tmp_path, monkeypatch):
    clock = Clock(NOW)
    service, recorder, plan = service_with(tmp_path, monkeypatch, clock, "alert_resolve_after = 120",
                                           pass_seconds=20.0)
    plan.append([STORM])
    service.run_pass()
    (alert,) = recorder.sent[0]
    assert epoch(alert["endsAt"]) - epoch(alert["startsAt"]) == 120.0
    # an hourly service: its alert must outlive the wait until the next pass re-sends it
    service.interval = 3600.0
    service.run_pass()
    (alert,) = recorder.sent[1]
    assert epoch(alert["endsAt"]) - epoch(alert["startsAt"]) == 3 * 3600.0


@pytest.mark.parametrize("value", ["30", "0", "86401"])
def test_a_resolve_window_under_a_minute_or_over_a_day_is_refused(tmp_path, monkeypatch, value):
    from opsctl.errors import ConfigError

    with pytest.raises(ConfigError, match="alert_resolve_after"):
        service_with(tmp_path, monkeypatch, Clock(NOW), f"alert_resolve_after = {value}", 1.0)
