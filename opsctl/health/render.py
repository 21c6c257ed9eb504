"""The rich table for ``opsctl health`` and ``opsctl preflight`` (kept apart so --json never
imports rich)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from opsctl.checks.model import Status
from opsctl.console import plain_console
from opsctl.health.service import HealthResult

_STYLE = {"OK": "green", "WARN": "yellow", "FAIL": "bold red", "UNKNOWN": "magenta"}


def status_text(status: str, suffix: str = "") -> Text:
    return Text.assemble((status, _STYLE[status]), suffix)


def render(result: HealthResult, *, show_all: bool = False, title: str = "opsctl health") -> None:
    console = plain_console()
    table = Table(title=f"{title} ({result.source}): {result.status}", show_lines=False)
    for col in ("node", "status", "check", "gpu", "summary"):
        table.add_column(col, no_wrap=col != "summary")
    for r in result.reports:
        rows = r.verdicts if show_all else r.problems
        if not rows:
            table.add_row(
                r.node, status_text(r.status.value), "", "", "all checks passed"
            )
            continue
        for i, v in enumerate(rows):
            table.add_row(
                r.node if i == 0 else "",
                status_text(v.status.value),
                v.code,
                "" if v.gpu is None else str(v.gpu),
                v.summary,
            )
    console.print(table)
    counts = {s.value: sum(1 for r in result.reports if r.status is s) for s in Status}
    console.print(", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n) or "no nodes")
    if result.mode:
        acted = [d for d in result.decisions if d.action not in ("none", "keep")]
        console.print(f"remediation ({result.mode}):" + ("" if acted else " nothing to do"))
        for d in acted:
            console.print(
                f"  {d.action:6} {d.node}: {d.why}"
                + (f" [{d.reason}]" if d.reason else "")
                + (f" -> {d.result}" if d.result not in ("noop", "pending") else "")
            )
