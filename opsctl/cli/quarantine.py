"""`opsctl quarantine list|add|release`: thin click wrappers over opsctl.launch.quarantine_ops."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from opsctl.cli.common import config_path, emit_json
from opsctl.nodeset import fold, parse_nodeset

if TYPE_CHECKING:
    from opsctl.audit import AuditLog
    from opsctl.launch.quarantine_ops import Listing
    from opsctl.slurm.base import SlurmBackend


def _context(ctx: click.Context) -> tuple[str, AuditLog, Callable[[], SlurmBackend]]:
    """The quarantine file, the audit log and a way to reach Slurm, from opsctl.toml."""
    from opsctl.audit import AuditLog
    from opsctl.config import load_config
    from opsctl.launch.settings import LaunchSection
    from opsctl.slurm import backend_from_config

    config = load_config(config_path(ctx))
    path = config.section("launch", LaunchSection).quarantine_file
    return path, AuditLog(config.audit.log), lambda: backend_from_config(config)


@click.group("quarantine")
def quarantine() -> None:
    """Nodes launches never use: list them, add some by hand, release repaired ones."""


@quarantine.command("list")
@click.argument("nodeset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def list_cmd(ctx: click.Context, nodeset: str | None, as_json: bool) -> None:
    """List quarantined nodes (only those in NODESET, if given) with their Slurm state."""
    from opsctl.launch.quarantine import Quarantine
    from opsctl.launch.quarantine_ops import SlurmView, list_quarantine, read_slurm

    names = parse_nodeset(nodeset) if nodeset is not None else None
    path, _, backend = _context(ctx)
    found = Quarantine.load(path)
    # An empty list needs no Slurm state: do not wait on slurmctld for it.
    listing = list_quarantine(found, read_slurm(backend) if found.entries else SlurmView({}), names)
    if as_json:
        emit_json(listing.to_dict())
        return
    if not listing.slurm_reachable:
        click.echo(f"warning: Slurm state unknown: {listing.slurm_error}", err=True)
    if not listing.nodes:
        where = f" in {nodeset}" if nodeset is not None else ""
        click.echo(f"no nodes quarantined{where} ({path})")
        return
    _print_table(listing)


def _print_table(listing: Listing) -> None:
    from rich.table import Table

    from opsctl.console import listing_console

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NODE", "SINCE (UTC)", "RUN", "JOB", "BY", "REASON", "SLURM", "SLURM REASON"):
        table.add_column(column, no_wrap=column not in {"REASON", "SLURM REASON"})
    for n in listing.nodes:
        table.add_row(n.node, n.since or "-", n.run_id or "-", str(n.job_id) if n.job_id else "-",
                      n.user or ("watch" if n.run_id else "-"), n.reason or "-", n.slurm_state,
                      n.slurm_reason or "-")
    listing_console().print(table)


@quarantine.command("release")
@click.argument("nodeset")
@click.option("--reason", default="", help="Why the nodes may be used again (audited).")
@click.option("--dry-run", is_flag=True, help="Check and show what would be released; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as JSON.")
@click.pass_context
def release(ctx: click.Context, nodeset: str, reason: str, dry_run: bool, as_json: bool) -> None:
    """Release NODESET from the quarantine (all named nodes must be quarantined). Does not resume
    them in Slurm: a node opsctl drained is returned to service with `opsctl resume`."""
    from opsctl.launch import quarantine_ops

    path, audit, backend = _context(ctx)
    plan, result = quarantine_ops.release(path, audit, backend, nodeset, reason, dry_run)
    if as_json:
        emit_json({"action": quarantine_ops.RELEASE, "result": result, "plan": plan.to_dict()})
        return
    target = fold(plan.requested)
    if result == "dry-run":
        click.echo(f"dry run: would release {target} from the quarantine")
    else:
        click.echo(f"released {target} from the quarantine: launches may place work there again")
    if plan.slurm_error:
        click.echo(f"warning: Slurm state not checked: {plan.slurm_error}", err=True)
    if plan.drained_by_opsctl:
        nodes = fold(plan.drained_by_opsctl)
        click.echo(f"  {nodes} still drained by opsctl (release does not resume): opsctl resume {nodes}")
    for name, state in sorted(plan.still_drained.items()):
        if name not in plan.drained_by_opsctl:
            click.echo(f"  {name} still out of service: {state}")


@quarantine.command("add")
@click.argument("nodeset")
@click.option("--reason", required=True, help="Why the nodes must not be used (audited).")
@click.option("--dry-run", is_flag=True, help="Check and show what would be quarantined; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as JSON.")
@click.pass_context
def add(ctx: click.Context, nodeset: str, reason: str, dry_run: bool, as_json: bool) -> None:
    """Keep NODESET out of future launches without draining it (running jobs are untouched)."""
    from opsctl.launch import quarantine_ops

    path, audit, backend = _context(ctx)
    plan, result = quarantine_ops.add(path, audit, backend, nodeset, reason, dry_run)
    if as_json:
        emit_json({"action": quarantine_ops.ADD, "result": result, "plan": plan.to_dict()})
        return
    if plan.slurm_error:
        click.echo(f"warning: node names not checked against Slurm: {plan.slurm_error}", err=True)
    if result == "applied":
        click.echo(f"quarantined {fold(plan.to_add)} (not drained: running jobs continue, "
                   "new launches leave them out)")
    elif result == "dry-run":
        click.echo(f"dry run: would quarantine {fold(plan.to_add)}")
    else:
        click.echo("nothing to quarantine")
    for name, why in sorted(plan.already.items()):
        click.echo(f"  skipped {name}: already quarantined ({why})")
