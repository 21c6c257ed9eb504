"""The rich table of ``opsctl preflight --fabric`` (kept apart so --json never imports rich): the
per-node verdicts as ``opsctl preflight`` prints them, then the links and the set's NCCL figure."""

from __future__ import annotations

from rich.table import Table

from opsctl.console import plain_console
from opsctl.health.render import render, status_text
from opsctl.preflight.fabric import FabricResult


def render_fabric(result: FabricResult, *, show_all: bool = False) -> None:
    render(result.health, show_all=show_all, title="opsctl preflight --fabric")
    console = plain_console()
    console.print(
        f"pair tests: {len(result.pair_tests)} pairs in {result.rounds} rounds"
        + (f" + {result.retest_rounds} retest rounds" if result.retest_rounds else "")
    )
    att = result.attribution
    if att.links or att.unisolated:
        table = Table(title="links")
        for col in ("status", "a", "b", "rail", "measured"):
            table.add_column(col)
        for (a, b, rail), r in sorted(att.links.items()):
            what = f"{r.gbps:.0f} Gb/s" if r.gbps is not None else r.error
            table.add_row(status_text("FAIL", " fabric-ib-link"), a, b, rail, what)
        for (a, b, rail), r in sorted(att.unisolated.items()):
            what = f"{r.gbps:.0f} Gb/s" if r.gbps is not None else r.error
            table.add_row(status_text("FAIL", " fabric-ib-pair (not isolated)"), a, b, rail, what)
        console.print(table)
    if result.multinode is not None:
        m = result.multinode
        console.print(status_text(m.status.value, f" {m.code}: {m.summary}"))
    if result.remediation is not None:
        acted = [d for d in result.remediation["decisions"] if d.get("action") not in ("none", "keep")]
        console.print("remediation:" + ("" if acted else " nothing to do"))
        for d in acted:
            console.print(f"  {d['action']:6} {d['node']}: {d['why']} -> {d.get('result', '')}")
    console.print(f"fabric: {result.status}")
