"""`opsctl nodes`, `opsctl drain`, `opsctl resume`: thin click wrappers over opsctl.drain."""

from __future__ import annotations

import click

from opsctl.audit import AuditLog
from opsctl.cli.common import config_path, emit_json
from opsctl.config import Config, load_config
from opsctl.errors import EXIT_UNHEALTHY, OpsctlError, UsageError
from opsctl.model import Node
from opsctl.nodeset import fold, parse_nodeset
from opsctl.slurm import backend_from_config


def _config(ctx: click.Context) -> Config:
    return load_config(config_path(ctx))


@click.command("nodes")
@click.argument("nodeset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def nodes(ctx: click.Context, nodeset: str | None, as_json: bool) -> None:
    """List nodes with state, reason, GPUs and jobs (NODESET: Slurm hostlist, e.g. gpu-[001-004])."""
    names = parse_nodeset(nodeset) if nodeset is not None else None
    config = _config(ctx)
    found = backend_from_config(config).nodes(names)
    held = _quarantined(config)
    if as_json:
        emit_json([{**n.to_dict(), "quarantined": n.name in held} for n in found])
        return
    _print_table(found, held)


def _quarantined(config: Config) -> set[str]:
    """Nodes in the launch quarantine list. Listing nodes must not fail on that file: a damaged
    one is a warning here (`opsctl quarantine list` reports it as an error)."""
    from opsctl.launch.quarantine import Quarantine
    from opsctl.launch.settings import LaunchSection

    path = config.section("launch", LaunchSection).quarantine_file
    try:
        return Quarantine.load(path).nodes
    except OpsctlError as exc:
        click.echo(f"warning: quarantine list not read: {exc}", err=True)
        return set()


def _print_table(found: list[Node], held: set[str]) -> None:
    from rich.table import Table

    from opsctl.console import listing_console

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NODE", "STATE", "GPUS", "JOBS", "REASON"):
        table.add_column(column, no_wrap=column != "REASON")
    for node in found:
        gpus = f"{node.gpus_alloc}/{node.gpus_total}" if node.gpus_total else "-"
        jobs = ",".join(str(j) for j in node.jobs) or "-"
        reason = node.reason + (f" [{node.reason_user}]" if node.reason and node.reason_user else "")
        style = "red" if node.out_of_service else None
        state = node.display_state + (" (quarantined)" if node.name in held else "")
        table.add_row(node.name, state, gpus, jobs, reason or "-", style=style)
    listing_console().print(table)


@click.command("drain")
@click.argument("nodeset")
@click.option("--reason", required=True, help="Why (stored as 'opsctl:manual:TEXT').")
@click.option("--dry-run", is_flag=True, help="Show what would be drained; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Override the blast-radius limit; take over drains by others (remediation, watch, operators) "
    "as this manual drain.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as JSON.")
@click.pass_context
def drain(ctx: click.Context, nodeset: str, reason: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """Drain NODESET (running jobs finish; no new ones start)."""
    from opsctl.drain import (
        apply_drain,
        opsctl_reason,
        plan_drain,
        previous_owner,
        record_rejected,
        validate_reason,
    )

    config = _config(ctx)
    audit = AuditLog(config.audit.log)
    try:
        names = parse_nodeset(nodeset)
        clean_reason = validate_reason(reason)
    except UsageError as exc:
        record_rejected(audit, "drain", nodeset, reason, str(exc))
        raise
    backend = backend_from_config(config)
    try:
        plan = plan_drain(backend.nodes(), names, config.guardrails, config.slurm.partition, force)
    except UsageError as exc:
        record_rejected(audit, "drain", nodeset, reason, str(exc))
        raise
    except OpsctlError as exc:
        record_rejected(audit, "drain", nodeset, reason, str(exc), result="failed")
        raise
    try:
        result = apply_drain(backend, audit, plan, clean_reason, dry_run)
    except OpsctlError:
        if as_json:
            emit_json({"action": "drain", "result": "refused" if plan.refusal else "failed",
                       "plan": plan.to_dict()})
        raise
    if as_json:
        emit_json({"action": "drain", "result": result, "plan": plan.to_dict()})
        return
    _report("drain", result, plan.to_drain, plan.skipped, f"reason {opsctl_reason(clean_reason)!r}")
    if result in ("applied", "dry-run"):
        verb = "took over" if result == "applied" else "would take over"
        for name, before in plan.taken_over.items():
            click.echo(f"  {verb} {name} from {previous_owner(before)}: {before!r}")


@click.command("resume")
@click.argument("nodeset")
@click.option("--dry-run", is_flag=True, help="Show what would be resumed; change nothing.")
@click.option("--force", is_flag=True, help="Also resume nodes drained by someone else.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as JSON.")
@click.pass_context
def resume(ctx: click.Context, nodeset: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """Resume NODESET; only nodes opsctl drained, unless --force."""
    from opsctl.drain import apply_resume, plan_resume, record_rejected, wait_responding

    config = _config(ctx)
    audit = AuditLog(config.audit.log)
    try:
        names = parse_nodeset(nodeset)
    except UsageError as exc:
        record_rejected(audit, "resume", nodeset, "", str(exc))
        raise
    backend = backend_from_config(config)
    try:
        plan = plan_resume(backend.nodes(), names, force)
    except UsageError as exc:
        record_rejected(audit, "resume", nodeset, "", str(exc))
        raise
    except OpsctlError as exc:
        record_rejected(audit, "resume", nodeset, "", str(exc), result="failed")
        raise
    try:
        result = apply_resume(backend, audit, plan, dry_run)
    except OpsctlError:
        if as_json:
            emit_json({"action": "resume", "result": "refused" if plan.refusal else "failed",
                       "plan": plan.to_dict()})
        raise
    silent = wait_responding(backend, plan.to_resume) if result == "applied" else []
    if as_json:
        emit_json({"action": "resume", "result": result, "plan": plan.to_dict(), "not_responding": silent})
    else:
        _report("resume", result, plan.to_resume, plan.skipped, "")
        if silent:
            click.echo(f"warning: {fold(silent)} resumed but not responding (is slurmd running?)", err=True)
    if silent:
        ctx.exit(EXIT_UNHEALTHY)


def _report(action: str, result: str, targets: list[str], skipped: dict[str, str], extra: str) -> None:
    past = {"drain": "drained", "resume": "resumed"}[action]
    if result == "applied":
        click.echo(f"{past} {fold(targets)}" + (f" ({extra})" if extra else ""))
    elif result == "dry-run":
        click.echo(f"dry run: would {action} {fold(targets)}" + (f" ({extra})" if extra else ""))
    elif result == "noop":
        click.echo(f"nothing to {action}")
    for name, why in sorted(skipped.items()):
        click.echo(f"  skipped {name}: {why}")
