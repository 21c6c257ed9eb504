"""The click entry point.

Commands are imported lazily so that `opsctl --help` and the light on-call commands start
without importing heavy modules (torch, transformers, pandas). Each command group lives in its
own module under opsctl/cli/ and stays thin: parse arguments, call library code, render.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from opsctl.errors import EXIT_UNKNOWN, OpsctlError

# name -> (module, attribute, one-line help). The help is duplicated here on purpose: listing
# commands in `opsctl --help` must not import every command module.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "config": ("opsctl.cli.config", "config", "Check opsctl.toml; write the configuration reference."),
    "nodes": ("opsctl.cli.nodes", "nodes", "List nodes with state, reason, GPUs and jobs."),
    "drain": ("opsctl.cli.nodes", "drain", "Drain nodes, with guardrails and an audit log."),
    "resume": ("opsctl.cli.nodes", "resume", "Resume nodes that opsctl drained."),
    "sim": ("opsctl.cli.sim", "sim", "Run a simulated Slurm cluster on this host."),
    "launch": ("opsctl.cli.launch", "launch", "Launch training jobs (rl-run: SFT then async RL)."),
    "health": ("opsctl.cli.health", "health", "Check node health (GPU, XID, IB, mounts); can drain."),
    "watch": ("opsctl.cli.watch", "watch", "Watch a Slurm run; --remediate drains failed nodes, requeues."),
    "preflight": ("opsctl.cli.preflight", "preflight", "Check node hardware against the expected profile."),
    "quarantine": ("opsctl.cli.quarantine", "quarantine", "List, add or release nodes launches never use."),
    "lab": ("opsctl.cli.lab", "lab", "Boot nspawn machines with simulated GPUs for tests and drills."),
    "remediator": ("opsctl.cli.remediator", "remediator", "The remediation service: run, pause, status."),
    "runs": ("opsctl.cli.runs", "runs", "List training runs: state, step, reward, eval."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command = getattr(module, entry[1])
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="opsctl.toml to use (default: $OPSCTL_CONFIG, then /etc/opsctl/opsctl.toml).",
)
@click.version_option(package_name="opsctl")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Operate a GPU cluster for RL training: nodes, health, drains, launches."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


def main(argv: list[str] | None = None) -> Any:
    """Run the CLI; OpsctlError becomes a one-line message and its exit code, never a traceback."""
    try:
        rv = cli.main(args=argv, prog_name="opsctl", standalone_mode=False)
        # In non-standalone mode click returns ctx.exit(code) as a value instead of exiting.
        sys.exit(rv if isinstance(rv, int) else 0)
    except OpsctlError as exc:
        click.echo(f"opsctl: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)  # 2 for usage errors
    except click.exceptions.Abort:
        click.echo("opsctl: aborted", err=True)
        sys.exit(EXIT_UNKNOWN)
    except KeyboardInterrupt:
        click.echo("opsctl: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the last line of defence against tracebacks
        if os.environ.get("OPSCTL_DEBUG"):
            raise
        click.echo(
            f"opsctl: internal error: {type(exc).__name__}: {exc} (set OPSCTL_DEBUG=1 for a traceback)",
            err=True,
        )
        sys.exit(EXIT_UNKNOWN)
