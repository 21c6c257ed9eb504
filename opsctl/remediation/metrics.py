"""The service's own Prometheus metrics, in its own registry (never the process-wide default, so a
test or a second loop in one process starts from zero), served over HTTP by prometheus_client.

Names start with ``opsctl_remediator_``. Verdict gauges carry the status as a label with value 1,
one series per (node, code): a check that changes status moves to another series, and series of
nodes or checks that left the pass are removed, not left at their last value. Slurm's state of each
node follows the same rule, so ``count by (state)`` counts every node exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from opsctl.checks.model import Status, worst
from opsctl.errors import ConfigError
from opsctl.remediation.policy import brake_limit, in_window

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from opsctl.checks.settings import PolicyConfig
    from opsctl.health.service import HealthResult
    from opsctl.model import Node

NS = "opsctl_remediator"
COUNTED_ACTIONS = ("drain", "resume", "hold", "alert")
# seconds; a 64-node pass over Prometheus takes about half a second, SSH passes far longer
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass
class Brake:
    """The brake as the state file and the [health] limits show it after a pass."""

    limit: int  # drains allowed per window
    in_window: int  # opsctl's own drains inside the window

    @property
    def left(self) -> int:
        return max(0, self.limit - self.in_window)


def brake_from_state(drains: Iterable[dict[str, Any]], policy: PolicyConfig, partition_size: int,
                     now: float) -> Brake:
    """The budget policy applies: ``max_drains``, and ``max_fraction`` of the partition (never less
    than one node), per window; drains in the state file inside the window spend it."""
    return Brake(limit=brake_limit(policy, partition_size),
                 in_window=in_window(list(drains), policy, now, "brake"))  # fatal_max_drains: apart


class RemediatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.check = Gauge(f"{NS}_check_status", "Worst verdict of each check on each node in the last "
                           "pass: 1 on the series of the current status.", ["node", "code", "status"],
                           registry=r)
        self.node = Gauge(f"{NS}_node_status", "Status of each node in the last pass: 1 on the series "
                          "of the current status.", ["node", "status"], registry=r)
        self.actions = Counter(f"{NS}_actions", "Drain, resume, hold and alert decisions by code and "
                               "result (applied, shadow, refused, failed, noop).",
                               ["action", "code", "result"], registry=r)
        self.passes = Counter(f"{NS}_passes", "Passes by outcome (ok, error).", ["result"], registry=r)
        self.pass_errors = Counter(f"{NS}_pass_errors", "Passes that failed, by error kind.", ["kind"],
                                   registry=r)
        self.duration = Histogram(f"{NS}_pass_duration_seconds", "Wall time of one pass (collect, judge, "
                                  "decide, act).", buckets=DURATION_BUCKETS, registry=r)
        self.last_success = Gauge(f"{NS}_last_success_timestamp_seconds", "Start of the last pass that "
                                  "ran to the end (epoch seconds).", registry=r)
        self.paused = Gauge(f"{NS}_paused", "1 while an operator has paused remediation (shadow mode).",
                            registry=r)
        self.refused = Gauge(f"{NS}_refused", "1 while policy refuses to remediate, with the reason.",
                             ["reason"], registry=r)
        self.brake_limit = Gauge(f"{NS}_brake_limit", "Drains allowed per brake window.", registry=r)
        self.brake_in_window = Gauge(f"{NS}_brake_drains_in_window", "opsctl's own drains inside the "
                                     "brake window.", registry=r)
        self.brake_left = Gauge(f"{NS}_brake_drains_left", "Drains left before the brake holds.",
                                registry=r)
        self.alerts_sent = Counter(f"{NS}_alerts_sent", "Alerts accepted by Alertmanager, by alertname.",
                                   ["alertname"], registry=r)
        self.alert_errors = Counter(f"{NS}_alertmanager_errors", "Alert sends that failed after "
                                    "their retries.", registry=r)
        self.interval = Gauge(f"{NS}_interval_seconds", "Configured time between passes.", registry=r)
        self.slurm_state = Gauge(f"{NS}_slurm_node_state", "Slurm's state of each node as sinfo summarises "
                                 "it (idle, mixed, allocated, drained, draining, down; * = not "
                                 "responding), as the last pass read it with its own drains and "
                                 "resumes: 1 on the series of the current state.", ["node", "state"],
                                 registry=r)
        self.passes.labels("ok")
        self.passes.labels("error")
        self.alert_errors.inc(0)
        self._checks: set[tuple[str, str, str]] = set()
        self._nodes: set[tuple[str, str]] = set()
        self._slurm: set[tuple[str, str]] = set()

    # -- one pass -----------------------------------------------------------------------------
    def record_pass(self, result: HealthResult, started: float, duration: float, *, paused: bool,
                    refusal: str) -> None:
        checks: set[tuple[str, str, str]] = set()
        nodes: set[tuple[str, str]] = set()
        for report in result.reports:
            nodes.add((report.node, report.status.value))
            by_code: dict[str, list[Status]] = {}
            for v in report.verdicts:
                by_code.setdefault(v.code, []).append(v.status)
            checks.update((report.node, code, worst(s).value) for code, s in by_code.items())
        _replace(self.check, self._checks, checks)
        _replace(self.node, self._nodes, nodes)
        self._checks, self._nodes = checks, nodes
        for d in result.decisions:
            if d.action in COUNTED_ACTIONS:
                self.actions.labels(d.action, d.code, d.result).inc()
        self.passes.labels("ok").inc()
        self.duration.observe(duration)
        self.last_success.set(started)
        self.set_paused(paused)
        self.refused.clear()
        self.refused.labels(refusal[:200]).set(1 if refusal else 0)

    def record_error(self, kind: str, duration: float) -> None:
        self.passes.labels("error").inc()
        self.pass_errors.labels(kind).inc()
        self.duration.observe(duration)

    def set_slurm_states(self, listing: Iterable[Node] | None) -> None:
        """One series per node on its current state; ``None`` (Slurm could not be read) removes them
        all: a state the service no longer knows must not show as the current one."""
        states = {(n.name, n.display_state) for n in listing or ()}
        _replace(self.slurm_state, self._slurm, states)
        self._slurm = states

    def set_paused(self, paused: bool) -> None:
        self.paused.set(1 if paused else 0)

    def set_brake(self, brake: Brake) -> None:
        self.brake_limit.set(brake.limit)
        self.brake_in_window.set(brake.in_window)
        self.brake_left.set(brake.left)

    # -- serving ------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> WSGIServer:
        """Serve /metrics in a daemon thread; the caller shuts the returned server down."""
        try:
            server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"remediator.metrics_address {host}:{port}: {exc.strerror or exc}") from None
        return server


def _replace(gauge: Gauge, old: set[Any], new: set[Any]) -> None:
    for labels in old - new:
        gauge.remove(*labels)
    for labels in new:
        gauge.labels(*labels).set(1)
