"""`opsctl runs list`: thin click wrapper over opsctl.launch.runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from opsctl.cli.common import config_path, emit_json

if TYPE_CHECKING:
    from opsctl.launch.runs import RunRow


@click.group("runs")
def runs() -> None:
    """The training runs under [launch] runs_dir, read from their directories."""


@runs.command("list")
@click.option("--runs-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of run directories (default: [launch] runs_dir of opsctl.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_cmd(ctx: click.Context, runs_dir: str | None, as_json: bool) -> None:
    """List runs, newest first: state, trainer steps, last reward and last held-out eval."""
    from opsctl.launch.runs import list_runs

    where = Path(runs_dir) if runs_dir is not None else _configured_runs_dir(ctx)
    rows = list_runs(where)
    if as_json:
        emit_json({"runs_dir": str(where), "runs": [r.to_dict() for r in rows]})
        return
    if not rows:
        click.echo(f"no runs in {where}")
        return
    _print_table(rows)


def _configured_runs_dir(ctx: click.Context) -> Path:
    from opsctl.config import load_config
    from opsctl.launch.settings import LaunchSection

    return Path(load_config(config_path(ctx)).section("launch", LaunchSection).runs_dir)


def _print_table(rows: list[RunRow]) -> None:
    from rich.table import Table

    from opsctl.console import listing_console

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("RUN", "LAUNCHER", "STATE", "STEP", "ATTEMPTS", "REWARD", "EVAL", "STARTED (UTC)", "NOTE"):
        table.add_column(column, no_wrap=column != "NOTE")
    for r in rows:
        step = "-" if r.steps_done is None else f"{r.steps_done}/{r.steps if r.steps is not None else '?'}"
        reward = "  ".join(f"{env} {value:.3f}" for env, value in sorted(r.rewards.items())) or "-"
        evals = "  ".join(f"{env} {e.accuracy:.3f}@{e.step}" for env, e in sorted(r.evals.items())) or "-"
        started = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.started)) if r.started else "-"
        table.add_row(r.run_id, r.launcher, r.state, step, str(r.attempts or "-"), reward, evals, started,
                      r.note or "")
    listing_console().print(table)
