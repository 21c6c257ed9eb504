"""`opsctl watch RUN`: a live view of a Slurm RL run; --remediate keeps it alive."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from opsctl.cli.common import config_path
from opsctl.errors import EXIT_OK, EXIT_UNHEALTHY, EXIT_UNKNOWN

EXIT_BY_FINAL = {"COMPLETED": EXIT_OK, "UNKNOWN": EXIT_UNKNOWN}


def _table(snap: Any) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def fmt(v: Any, spec: str = "") -> str:
        return "-" if v is None else format(v, spec)

    head = Text(
        f"run {snap.run_id}  job {snap.job_id} {snap.job_state}  attempt {snap.attempt}  "
        f"step {fmt(snap.step)}  reward {fmt(snap.reward, '.3f')}  tokens/s {fmt(snap.tokens_per_s, '.0f')}  "
        f"off-policy lag {fmt(snap.off_policy_lag)}  checkpoint {fmt(snap.last_checkpoint)}"
        + "".join(f"  {name.replace('_', ' ')} {value:g}" for name, value in snap.environment.items())
    )
    attempts = Table(title="attempts", title_justify="left")
    for col in ("attempt", "job", "state", "nodes", "resumed at", "failed nodes"):
        attempts.add_column(col)
    from opsctl.nodeset import fold

    for a in snap.attempts:
        attempts.add_row(str(a["attempt"]), str(a["job_id"]), a["state"], fold(a["nodes"]),
                         str(a["resume_step"]), fold(a["failed_nodes"]))
    nodes = Table(title="allocated nodes", title_justify="left")
    for col in ("node", "slurm", "health", "failed"):
        nodes.add_column(col)
    for n in snap.nodes:
        nodes.add_row(n.name, n.state, n.health or "-", n.failed or "",
                      style="red" if n.failed else None)
    from opsctl.watch import sparklines

    parts: list[Any] = [head, Text(sparklines(snap), style="cyan"), attempts, nodes]
    parts.extend(Text(e, style="yellow") for e in snap.events)
    return Group(*parts)


@click.command("watch")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per update.")
@click.option("--remediate", is_flag=True,
              help="Drain failed nodes, quarantine them, requeue the run without them.")
@click.option("--interval", type=float, default=None, help="Seconds between updates ([launch] poll_s).")
@click.option("--once", is_flag=True, help="One update, then exit.")
@click.pass_context
def watch(ctx: click.Context, run: str, as_json: bool, remediate: bool, interval: float | None,
          once: bool) -> None:
    """Watch RUN (a run directory or run id): attempts, step, reward, tokens/s, lag, checkpoint,
    node health. Exit 0 when the run completed, 1 when it failed or gave up, 3 when unknown."""
    from opsctl.watch import make_watcher

    watcher = make_watcher(config_path(ctx), run, remediate)
    pause = interval if interval is not None else watcher.settings.poll_s
    if interval is not None and interval <= 0:
        from opsctl.errors import UsageError

        raise UsageError("--interval must be > 0")
    if as_json:
        while True:
            snap = watcher.update()
            click.echo(json.dumps(snap.to_json(), sort_keys=True))
            if snap.final_state or once:
                break
            time.sleep(pause)
    else:
        from rich.live import Live

        from opsctl.console import plain_console

        console = plain_console()
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while True:
                snap = watcher.update()
                live.update(_table(snap), refresh=True)
                if snap.final_state or once:
                    break
                time.sleep(pause)
        console.print()
        console.print(watcher.summary())
    final = watcher.ledger.final_state
    if once and not final:
        sys.exit(EXIT_OK)
    sys.exit(EXIT_BY_FINAL.get(final, EXIT_UNHEALTHY))
