"""``opsctl health``: collect, judge and (with --remediate) act. Thin over opsctl.health.service."""

from __future__ import annotations

import json

import click

from opsctl.checks.settings import SOURCES
from opsctl.cli.common import config_path
from opsctl.errors import UsageError


@click.command("health")
@click.argument("nodeset", required=False)
@click.option(
    "--source",
    type=click.Choice(SOURCES),
    default=None,
    help="Where evidence comes from (default: [health] source).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option(
    "--remediate", is_flag=True, help="Drain failing nodes (brake, ownership and shadow mode apply)."
)
@click.option("--dry-run", is_flag=True, help="With --remediate: decide and log, change nothing.")
@click.option("--all", "show_all", is_flag=True, help="Table: list every verdict, not only problems.")
@click.option(
    "--coverage",
    "show_coverage",
    is_flag=True,
    help="List which checks the source can evaluate, on which nodes; exit 1 if a required one cannot.",
)
@click.pass_context
def health(
    ctx: click.Context,
    nodeset: str | None,
    source: str | None,
    as_json: bool,
    remediate: bool,
    dry_run: bool,
    show_all: bool,
    show_coverage: bool,
) -> None:
    """Check node health (GPUs, XIDs, ECC, NVLink, PCIe, InfiniBand, mounts, slurmd).

    Exit 0 healthy (OK or WARN), 1 unhealthy, 2 usage or config error, 3 unknown. With --coverage:
    0 when every required check ([health] required_checks) has evidence, 1 when one has none.
    """
    from opsctl.health import service

    if dry_run and not remediate:
        raise UsageError("--dry-run only makes sense with --remediate")
    if show_coverage and (remediate or show_all):
        raise UsageError("--coverage reports evidence only; it takes no --remediate or --all")
    hctx = service.load_context(config_path(ctx))
    targets = service.pass_nodes(hctx, nodeset)  # a Slurm read that lists them is the pass's own
    nodes = targets.names
    src = service.make_source(hctx, source or hctx.health.source)
    if show_coverage:
        import time

        from opsctl.checks.coverage import coverage, render_text

        cov = coverage(src.collect(nodes, time.time()), hctx.health.required_checks)
        if as_json:
            click.echo(json.dumps({"source": src.name, **cov.to_json()}, indent=1, sort_keys=True))
        else:
            click.echo(render_text(cov, src.name))
        ctx.exit(0 if cov.ok else 1)
    result = service.run_health(hctx, nodes, src, remediate=remediate, dry_run=dry_run, slurm=targets.slurm)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1, sort_keys=True))
    else:
        from opsctl.health.render import render

        render(result, show_all=show_all)
    if result.refusal:
        # the report above stands; nothing was changed, and the configuration must be fixed
        click.echo(f"opsctl: error: remediation refused: {result.refusal}", err=True)
        ctx.exit(2)
    ctx.exit(result.exit_code)
