"""The long-lived loop behind ``opsctl remediator run``.

Each pass is exactly ``opsctl health --remediate``: :func:`opsctl.health.service.run_health` with
``remediate=True`` on the configured source, so the policy, brake, storm rule, guardrails and audit
are the same code. The loop adds only what running unattended needs: a fixed cadence, one source
object for the process's life (the SSH source keeps a journal cursor between passes), survival of a
failing pass (counted, logged, retried next interval), the operator's pause (shadow mode), metrics,
alerts and a status file.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from opsctl.errors import SourceUnreachable, Unreachable
from opsctl.remediation.alerts import AlertmanagerClient, build_alerts
from opsctl.remediation.metrics import RemediatorMetrics, brake_from_state
from opsctl.remediation.pause import read_pause
from opsctl.remediation.scrape import interval_warning, scrape_interval
from opsctl.remediation.settings import RemediatorSection
from opsctl.remediation.status import (
    RECENT_ACTIONS,
    RECENT_KEPT,
    SHOWN_ACTIONS,
    PassStatus,
    read_status,
    write_status,
)

if TYPE_CHECKING:
    from opsctl.evidence.base import Source
    from opsctl.health.service import HealthContext, HealthResult
    from opsctl.model import Node
    from opsctl.remediation.policy import Decision

log = logging.getLogger("opsctl.remediator")


class Remediator:
    def __init__(self, config_path: str | None, *, interval: float | None = None,
                 metrics: RemediatorMetrics | None = None) -> None:
        from opsctl.health import service

        self.config_path = config_path
        # a bad configuration ends the service here (exit 2), before the first pass
        self.ctx: HealthContext = service.load_context(config_path)
        assert self.ctx.config is not None
        self.settings = self.ctx.config.section("remediator", RemediatorSection)
        self.interval = interval if interval is not None else self.settings.interval
        self.source: Source = service.make_source(self.ctx, self.ctx.health.source)
        self.metrics = metrics or RemediatorMetrics()
        self.metrics.interval.set(self.interval)
        s = self.settings
        self.alerts = (AlertmanagerClient(s.alertmanager_url, s.alertmanager_timeout, s.alertmanager_attempts)
                       if s.alertmanager_url else None)
        self.host = socket.gethostname()
        self.number = 0
        self.errors = 0
        self.last_success = 0.0
        # since when every pass found the source unreachable (in memory: a restart starts it again)
        self.source_lost_since: float | None = None
        self.targets: list[str] = []  # the nodes of the last pass that listed them
        previous = read_status(self.settings.status_file)  # what the service did before a restart
        self.recent: list[dict[str, Any]] = previous.recent if previous is not None else []

    # -- one pass -----------------------------------------------------------------------------
    def run_pass(self) -> PassStatus:
        self.number += 1
        started, t0 = time.time(), time.monotonic()
        paused = read_pause(self.settings.pause_file)
        self.metrics.set_paused(paused is not None)
        try:
            result = self._evaluate(shadow=paused is not None)
        except Exception as exc:  # Prometheus, Slurm or a node down: this pass is lost, not the service
            duration = time.monotonic() - t0
            self.errors += 1
            # a lost source is still counted as what it is to the dashboards: Unreachable
            kind = "Unreachable" if isinstance(exc, Unreachable) else type(exc).__name__
            self.metrics.record_error(kind, duration)
            log.error("pass %d failed after %.2fs: %s: %s", self.number, duration, kind, exc)
            self.metrics.set_slurm_states(self._read_slurm())  # Slurm's view is still worth showing
            self._source_lost(exc, started)
            status = PassStatus(time=started, number=self.number, ok=False, duration_s=round(duration, 3),
                                interval=self.interval, error=f"{kind}: {exc}"[:500],
                                paused=paused is not None, last_success=self.last_success,
                                errors=self.errors, recent=self.recent)
            self._write_status(status)
            return status
        duration = time.monotonic() - t0
        self.last_success = started
        self.source_lost_since = None
        refusal = result.refusal
        self.metrics.record_pass(result, started, duration, paused=paused is not None, refusal=refusal)
        counts = {s: sum(1 for r in result.reports if r.status.value == s)
                  for s in ("OK", "WARN", "FAIL", "UNKNOWN")}
        shown = [d for d in result.decisions if d.action in SHOWN_ACTIONS]
        for d in shown:
            log.info("%s %s: code=%s result=%s%s; %s", d.action, d.node, d.code or "-", d.result,
                     f" reason={d.reason!r}" if d.reason and d.action in ("drain", "hold") else "", d.why)
        log.info("pass %d ok in %.2fs, mode %s%s: %d nodes (%s)%s%s", self.number, duration, result.mode,
                 " (paused)" if paused else "", len(result.reports),
                 ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none",
                 "".join(f", {sum(1 for d in shown if d.action == a)} {a}" for a in SHOWN_ACTIONS
                         if any(d.action == a for d in shown)),
                 f"; refused: {refusal}" if refusal else "")
        brief = [{k: v for k, v in d.to_json().items() if k != "verdicts"} for d in shown]
        self.recent = (self.recent + [{"time": started, "mode": result.mode, **d} for d in brief
                                      if d["action"] in RECENT_ACTIONS])[-RECENT_KEPT:]
        self._send_alerts(result.decisions, result.mode)
        self._after_pass(started, result.slurm.nodes if result.slurm is not None else self._read_slurm())
        status = PassStatus(time=started, number=self.number, ok=True, duration_s=round(duration, 3),
                            interval=self.interval, mode=result.mode, paused=paused is not None,
                            refusal=refusal, counts=counts, decisions=brief, recent=self.recent,
                            last_success=started, errors=self.errors)
        self._write_status(status)
        return status

    def _evaluate(self, *, shadow: bool) -> HealthResult:
        from opsctl.health import service

        if self.ctx.slurm is None:  # Slurm's backend could not start: try again, every pass
            fresh = service.load_context(self.config_path)
            self.ctx = dataclasses.replace(self.ctx, slurm=fresh.slurm, slurm_error=fresh.slurm_error)
        ctx = self.ctx
        if shadow:  # the operator's pause: decide, log and report, but change nothing in Slurm
            ctx = dataclasses.replace(ctx, health=dataclasses.replace(ctx.health, shadow=True))
        targets = service.pass_nodes(ctx, None)  # the pass's one Slurm read, unless [health] nodes
        self.targets = targets.names
        return service.run_health(ctx, targets.names, self.source, remediate=True, dry_run=False,
                                  slurm=targets.slurm)

    def _source_lost(self, exc: Exception, now: float) -> None:
        """A pass the source failed (Prometheus gone): past ``[health] unknown_alert_after`` of them
        in a row, the one page for the fleet (source-lost), re-sent every such pass. Nothing is
        drained: the pass never reached a decision. Any other failure ends the run of lost passes."""
        if not isinstance(exc, SourceUnreachable):
            self.source_lost_since = None
            return
        from opsctl.remediation.unknown import source_lost_alert

        since = self.source_lost_since = self.source_lost_since or now
        if now - since < self.ctx.health.unknown_alert_after:
            return
        what = f"{self.source.name} unreachable: {exc}"[:300]
        self._send_alerts([source_lost_alert(self.targets or ["all"], now - since, what)], "")

    def _send_alerts(self, decisions: list[Decision], mode: str) -> None:
        if self.alerts is None:
            return
        # stamped now, at the send: a pass can take many intervals, and an alert whose window began
        # at the pass start could arrive already ended
        payload = build_alerts(decisions, time.time(), self.settings.resolve_window(self.interval),
                               host=self.host, mode=mode)
        if not payload:
            return
        try:
            self.alerts.send(payload)
        except Exception as exc:  # never fatal: the alert is re-sent next pass while it holds
            self.metrics.alert_errors.inc()
            log.error("alerts not delivered: %s", exc)
            return
        for alert in payload:  # the alert decisions themselves are logged with the pass
            self.metrics.alerts_sent.labels(alert["labels"]["alertname"]).inc()

    def _read_slurm(self) -> list[Node] | None:
        """Every node as Slurm shows it now (a pass that failed, or read no Slurm); None when Slurm
        cannot be read (logged)."""
        if self.ctx.slurm is None:
            return None
        try:
            return self.ctx.slurm.nodes(None)
        except Exception as exc:
            log.warning("Slurm state not read: %s: %s", type(exc).__name__, exc)
            return None

    def _after_pass(self, now: float, listing: list[Node] | None) -> None:
        """The pass's Slurm snapshot (with its own drains and resumes) feeds the node-state gauges
        and the brake's partition size; without one the brake gauges keep their last value."""
        self.metrics.set_slurm_states(listing)
        if listing is not None:
            self._update_brake(now, listing)

    def _update_brake(self, now: float, listing: list[Node]) -> None:
        from opsctl.remediation.state import PolicyState
        from opsctl.slurm.snapshot import partition_size

        ctx = self.ctx
        try:
            state = PolicyState.load(ctx.health.state_file)
            partition = ctx.config.slurm.partition if ctx.config is not None else None
            size = partition_size(listing, partition)
            self.metrics.set_brake(brake_from_state(state.drains, ctx.health.policy(), size, now))
        except Exception as exc:  # the gauges keep their last value; the pass itself ran
            log.warning("brake state not updated: %s: %s", type(exc).__name__, exc)

    def check_interval(self) -> str:
        """Warn (once, at start) when the interval is shorter than Prometheus's scrape interval,
        asked of Prometheus where the source reads it; the warning, "" when none."""
        if "prometheus" not in self.ctx.health.source.split("+"):
            return ""
        try:
            scrape = scrape_interval(self.ctx.prometheus_url)
        except Exception as exc:  # unknown: nothing to compare with, and never a reason not to run
            log.info("Prometheus's scrape interval not known: %s: %s", type(exc).__name__, exc)
            return ""
        warning = interval_warning(self.interval, scrape)
        if warning:
            log.warning("%s", warning)
        return warning

    def _write_status(self, status: PassStatus) -> None:
        try:
            write_status(self.settings.status_file, status)
        except OSError as exc:
            log.warning("status file %s not written: %s", self.settings.status_file, exc.strerror or exc)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, once: bool = False) -> PassStatus | None:
        """Pass every interval (measured start to start) until ``stop`` is set; returns the last
        pass's status. Serves the metrics for as long as it runs."""
        hp = self.settings.metrics_host_port()
        server = self.metrics.serve(*hp) if hp is not None else None
        log.info("remediator started: interval %.1fs, source %s, metrics %s, alertmanager %s, pause file "
                 "%s", self.interval, self.source.name,
                 f"http://{hp[0]}:{hp[1]}/metrics" if hp else "off",
                 self.settings.alertmanager_url or "off", self.settings.pause_file)
        self.check_interval()
        last: PassStatus | None = None
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                last = self.run_pass()
                if once:
                    break
                stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            log.info("remediator stopped after %d pass(es), %d failed", self.number, self.errors)
        return last
