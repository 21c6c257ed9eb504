"""``opsctl preflight``: check nodes' hardware against the expected profile. Thin over
opsctl.preflight.service."""

from __future__ import annotations

import json

import click

from opsctl.cli.common import config_path


@click.command("preflight")
@click.argument("nodeset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Table: list every verdict, not only problems.")
@click.pass_context
def preflight(ctx: click.Context, nodeset: str | None, as_json: bool, show_all: bool) -> None:
    """Check each node's GPUs, HCAs, NVMe, NUMA affinity and Slurm GRES against [preflight].

    Read-only. Exit 0 conformant (OK or WARN), 1 a FAIL, 2 usage or config error, 3 unknown.
    """
    from opsctl.preflight import service

    pctx = service.load_context(config_path(ctx))
    nodes = service.resolve_nodes(pctx, nodeset)
    result = service.run_preflight(pctx, nodes)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1, sort_keys=True))
    else:
        from opsctl.checks.render import render

        render(result, show_all=show_all, title="opsctl preflight")
    ctx.exit(result.exit_code)
