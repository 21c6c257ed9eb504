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


@runs.command("export")
@click.argument("run")
@click.option("--output", "-o", "output", required=True, type=click.Path(file_okay=False),
              help="Directory to write (absent or empty).")
@click.option("--step", type=click.IntRange(min=0), default=None,
              help="RL policy version to export (default: the newest; the SFT model if RL published none).")
@click.option("--sft", is_flag=True, help="Export the SFT model (sft/final) instead of an RL version.")
@click.option("--runs-dir", type=click.Path(file_okay=False), default=None,
              help="Where a run id is looked up (default: [launch] runs_dir of opsctl.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a line.")
@click.pass_context
def export_cmd(ctx: click.Context, run: str, output: str, step: int | None, sft: bool, runs_dir: str | None,
               as_json: bool) -> None:
    """Write a run's policy as a Hugging Face model directory, checked by loading it back.

    RUN is a run directory or a run id under the runs directory. Needs the training extra
    (torch, transformers)."""
    from dataclasses import asdict

    from opsctl.errors import UsageError

    if sft and step is not None:
        raise UsageError("--sft and --step name different policies: give one")
    run_dir = _find_run_dir(ctx, run, runs_dir)
    try:
        from training.hf_export import ExportError, export_run
    except ImportError as exc:
        raise UsageError(f"runs export needs the training extra (pip install 'opsctl[training]'): "
                         f"{exc}") from None
    try:
        done = export_run(run_dir, Path(output).absolute(), step=step, sft=sft)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        emit_json(asdict(done))
        return
    what = "the SFT model" if done.source == "sft" else f"RL policy version {done.step}"
    click.echo(f"exported {what} of {run_dir} to {done.output} "
               f"({done.tensors} tensors, loaded back and equal)")


def _find_run_dir(ctx: click.Context, run: str, runs_dir: str | None) -> Path:
    """A run directory (it holds config.toml) or a run id under the runs directory."""
    from opsctl.errors import UsageError

    direct = Path(run)
    if (direct / "config.toml").is_file():
        return direct.absolute()
    where = Path(runs_dir) if runs_dir is not None else _configured_runs_dir(ctx)
    if (where / run / "config.toml").is_file():
        return (where / run).absolute()
    raise UsageError(f"unknown run {run!r}: no config.toml in {direct} or {where / run}")


@runs.command("view")
@click.argument("run", nargs=-1, required=True)
@click.option("--output", "-o", "output", type=click.Path(file_okay=False), default=None,
              help="Write the viewer as static files here instead of serving it.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to serve on (reach a cluster's from your machine with `ssh -L`).")
@click.option("--port", type=click.IntRange(0, 65535), default=8050, show_default=True,
              help="Port to serve on (0: any free one).")
@click.option("--runs-dir", type=click.Path(file_okay=False), default=None,
              help="Where a run id is looked up (default: [launch] runs_dir of opsctl.toml).")
@click.pass_context
def view_cmd(ctx: click.Context, run: tuple[str, ...], output: str | None, host: str, port: int,
             runs_dir: str | None) -> None:
    """Show runs in a browser: reward and eval curves per environment, attempts and failures, and
    sampled rollouts; several RUNs side by side. Reads only the run directories; no internet."""
    from opsctl.launch import viewer

    dirs = [_find_run_dir(ctx, r, runs_dir) for r in run]
    if output is not None:
        click.echo(f"wrote {viewer.write_site(dirs, Path(output))}")
        return
    try:
        viewer.serve(dirs, host, port, ready=lambda url: click.echo(f"serving {url} (Ctrl-C stops)"))
    except OSError as exc:
        from opsctl.errors import UsageError

        raise UsageError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass
