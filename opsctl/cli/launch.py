"""`opsctl launch rl-run`: run a training job (SFT then asynchronous RL)."""

from __future__ import annotations

import json
import signal
import sys

import click

from opsctl.cli.common import config_path
from opsctl.errors import EXIT_UNHEALTHY, ConfigError, UsageError


@click.group()
def launch() -> None:
    """Launch training jobs."""


@launch.command("rl-run")
@click.option("--local", "local", is_flag=True, help="Run every process on this machine.")
@click.option("--job", "job_file", type=click.Path(dir_okay=False), default=None,
              help="The job's TOML file (default: every job setting at its default).")
# The old spelling: `opsctl --config` names opsctl.toml, so one flag named two files.
@click.option("--config", "old_job", type=click.Path(dir_okay=False), default=None, hidden=True)
@click.option(
    "-o",
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Dotted override, e.g. -o trainer.lr=1e-4 (repeatable).",
)
@click.option(
    "--output", default=None, type=click.Path(file_okay=False), help="Run directory (default runs/<run-id>/)."
)
@click.option("--resume", is_flag=True, help="Continue the run in --output from its last checkpoint.")
@click.option("--dry-run", is_flag=True, help="Validate and print the resolved config; start nothing.")
@click.option("--plan", "plan_only", is_flag=True,
              help="Print per-GPU trainer memory, traffic and publication cost; start nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--nodes", type=int, default=None, help="Slurm: nodes in all ([launch] nodes, 64).")
@click.option("--inference-nodes", type=int, default=None,
              help="Slurm: inference nodes ([launch] inference_nodes, 16; its share of a smaller --nodes).")
@click.option("--nodelist", default=None, help="Slurm: run on exactly these nodes (a node set).")
@click.pass_context
def rl_run(
    ctx: click.Context,
    local: bool,
    job_file: str | None,
    old_job: str | None,
    overrides: tuple[str, ...],
    output: str | None,
    resume: bool,
    dry_run: bool,
    plan_only: bool,
    as_json: bool,
    nodes: int | None,
    inference_nodes: int | None,
    nodelist: str | None,
) -> None:
    """SFT, then RL with inference, orchestrator and trainer processes."""
    config = _job_file(job_file, old_job)
    if plan_only:  # a layout that does not fit the GPU: the plan, then exit 2 (a config to change)
        from opsctl.launch.plan import plan_cli

        text, fits = plan_cli(config_path(ctx), config, list(overrides), nodes, inference_nodes, as_json)
        click.echo(text)
        if not fits:
            raise ConfigError("the layout does not fit the GPU (see the plan above)")
        return
    from opsctl.launch import local as launcher
    from training.config import dump_toml
    from training.rundir import resume_point

    if not local:  # Slurm submission lives in opsctl.launch.slurm
        from opsctl.launch.slurm import LaunchRequest, run_cli

        if resume:
            raise UsageError("--resume is for --local runs; a Slurm run resumes by requeue (opsctl watch)")
        req = LaunchRequest(config, list(overrides), nodes, inference_nodes, nodelist, output)
        click.echo(run_cli(config_path(ctx), req, dry_run, as_json)[0])
        return
    from opsctl.launch.environments import StagedEnvironment, stage

    run, cfg = launcher.prepare(config, list(overrides), output, resume)
    staged = StagedEnvironment() if resume else stage(cfg, sys.executable)
    if dry_run:
        staged.discard()
        click.echo(f"# run directory: {run.root}")
        click.echo(dump_toml(cfg))
        return
    if not resume:
        launcher.write_config(run, cfg)
        staged.commit(run.root)
    step = resume_point(run) if resume else 0
    job = launcher.LocalLauncher(run, cfg)

    # SIGTERM from a scheduler or a user: stop the children, then report failure.
    def on_term(*_: object) -> None:
        job.stop_all()
        sys.exit(EXIT_UNHEALTHY)

    signal.signal(signal.SIGTERM, on_term)
    try:
        job.launch(step)
    except RuntimeError as exc:
        click.echo(f"opsctl: run failed: {exc}", err=True)
        sys.exit(EXIT_UNHEALTHY)
    info = launcher.summary(run)
    if as_json:
        click.echo(json.dumps(info))
    else:
        click.echo(f"run {run.root}: finished")
        for e in info["evals"]:  # type: ignore[attr-defined]
            env = f" of {e['env']}" if e.get("env") else ""
            click.echo(f"  eval{env} at step {e['step']}: accuracy {e['accuracy']:.3f}")


def _job_file(job_file: str | None, old_job: str | None) -> str | None:
    """``--job``, or the old ``launch rl-run --config`` with a notice (it still works)."""
    if old_job is None:
        return job_file
    if job_file is not None:
        raise UsageError("give the job TOML once: --job (launch rl-run --config is its old name)")
    click.echo("opsctl: notice: `launch rl-run --config FILE` is now `--job FILE` "
               "(`opsctl --config` names opsctl.toml)", err=True)
    return old_job
