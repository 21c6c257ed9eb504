"""``opsctl remediator run|pause|unpause|status``: the remediation service and its operator controls.
Thin over opsctl.remediation; the loop and its dependencies are imported only by ``run``."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from opsctl.cli.common import config_path, emit_json
from opsctl.config import field_limits
from opsctl.errors import EXIT_UNKNOWN
from opsctl.remediation.settings import RemediatorSection  # stdlib-light: the help shows its default

if TYPE_CHECKING:
    from opsctl.audit import AuditLog
    from opsctl.remediation.pause import Pause
    from opsctl.remediation.status import PassStatus


def _settings(ctx: click.Context) -> tuple[RemediatorSection, AuditLog]:
    from opsctl.audit import AuditLog
    from opsctl.config import load_config

    cfg = load_config(config_path(ctx))
    return cfg.section("remediator", RemediatorSection), AuditLog(cfg.audit.log)


def _setup_logging() -> None:
    import logging
    import os
    import sys

    handler = logging.StreamHandler(sys.stderr)
    # under systemd the journal stamps each line itself
    fmt = "%(levelname)s %(message)s"
    if not os.environ.get("JOURNAL_STREAM"):
        fmt = "%(asctime)s " + fmt
    handler.setFormatter(logging.Formatter(fmt))
    logger = logging.getLogger("opsctl.remediator")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


@click.group("remediator")
def remediator() -> None:
    """The remediation service: health passes that drain by themselves, paused by an operator."""


@remediator.command("run")
@click.option("--interval", type=click.FloatRange(field_limits(RemediatorSection, "interval")["ge"],
                                                  field_limits(RemediatorSection, "interval")["le"]),
              default=None,
              help=f"Seconds between passes (default: [remediator] interval, "
                   f"{RemediatorSection.interval:g}).")
@click.option("--once", is_flag=True, help="One pass, then exit (0 if it ran, 3 if it failed).")
@click.pass_context
def run(ctx: click.Context, interval: float | None, once: bool) -> None:
    """Evaluate every interval and remediate through the same policy, brake and audit as
    `opsctl health --remediate`; serves metrics, sends alerts. Stops cleanly on SIGTERM/SIGINT."""
    import signal
    import threading

    from opsctl.remediation.loop import Remediator, log

    _setup_logging()
    service = Remediator(config_path(ctx), interval=interval)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: stopping after the current pass", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    last = service.run(stop, once=once)
    if once and (last is None or not last.ok):
        ctx.exit(EXIT_UNKNOWN)


@remediator.command("pause")
@click.option("--reason", required=True, help="Why remediation must not act (audited, shown in status).")
@click.pass_context
def pause_cmd(ctx: click.Context, reason: str) -> None:
    """Pause remediation: passes go on and report, drains and resumes become shadow only."""
    from opsctl.remediation.pause import pause

    settings, audit = _settings(ctx)
    current, result = pause(settings.pause_file, audit, reason)
    if result == "noop":
        click.echo(f"already paused by {current.by} since {current.since}: {current.reason}")
    else:
        click.echo(f"remediation paused ({settings.pause_file}); passes continue in shadow mode until "
                   "`opsctl remediator unpause`")


@remediator.command("unpause")
@click.option("--reason", default="", help="Why remediation may act again (audited).")
@click.pass_context
def unpause_cmd(ctx: click.Context, reason: str) -> None:
    """Lift the pause: the next pass drains and resumes again."""
    from opsctl.remediation.pause import unpause

    settings, audit = _settings(ctx)
    lifted, _ = unpause(settings.pause_file, audit, reason)
    if lifted is None:
        click.echo("not paused")
    else:
        click.echo(f"remediation unpaused (was paused by {lifted.by} since {lifted.since}: {lifted.reason})")


@remediator.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Paused or not, the last pass and what it decided. Exit 0 when a pass ran within three
    intervals, 3 when none did (the service is stopped or failing)."""
    from opsctl.remediation.pause import read_pause
    from opsctl.remediation.status import read_status

    settings, _ = _settings(ctx)
    paused = read_pause(settings.pause_file)
    last = read_status(settings.status_file)
    now = time.time()
    stale = last is None or last.stale(now)
    if as_json:
        emit_json({
            "paused": paused is not None,
            "pause": paused.to_json() if paused else None,
            "last_pass": last.to_json() if last else None,
            "stale": stale,
            "status_file": settings.status_file,
        })
    else:
        _print_status(paused, last, now, stale, settings.status_file)
    if stale:
        ctx.exit(EXIT_UNKNOWN)


def _when(t: float, now: float) -> str:
    stamp = datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
    return f"{stamp} ({now - t:.0f}s ago)"


def _print_status(pause: Pause | None, last: PassStatus | None, now: float, stale: bool, path: str) -> None:
    if pause is not None:
        click.echo(f"paused: yes, by {pause.by} since {pause.since}: {pause.reason}")
    else:
        click.echo("paused: no")
    if last is None:
        click.echo(f"last pass: none recorded ({path}); is opsctl-remediation.service running?")
        return
    outcome = "ok" if last.ok else f"FAILED: {last.error}"
    click.echo(f"last pass: #{last.number} at {_when(last.time, now)}, {outcome}, {last.duration_s:.2f}s"
               + (f", mode {last.mode}" if last.mode else ""))
    if last.last_success and not last.ok:
        click.echo(f"last successful pass: {_when(last.last_success, now)}")
    if stale:
        click.echo(f"warning: no successful pass within 3 x {last.interval:g}s: the service is stopped or "
                   "failing (journalctl -u opsctl-remediation)")
    if last.counts:
        click.echo("nodes: " + ", ".join(f"{n} {s}" for s, n in last.counts.items() if n))
    if last.refusal:
        click.echo(f"remediation refused: {last.refusal}")
    if last.ok:
        if last.decisions:
            click.echo("this pass:")
            for d in last.decisions:
                click.echo(_decision_line(d))
        else:
            click.echo("this pass: no drain, resume, hold or alert")
    if last.recent:
        click.echo("recent drains and resumes:")
        for d in last.recent:
            stamp = datetime.fromtimestamp(float(d["time"]), UTC).isoformat(timespec="seconds")
            click.echo(_decision_line(d, f"{stamp} {d.get('mode') or '-':<6} "))


def _decision_line(d: dict[str, Any], prefix: str = "") -> str:
    reason = f" [{d['reason']}]" if d.get("reason") else ""
    code = d.get("code") or "-"
    return f"  {prefix}{d['action']:<7} {d['node']:<16} {code:<14} {d['result']:<8}{reason} {d['why']}"
