"""``opsctl preflight``: check nodes' hardware against the expected profile, and with ``--fabric``
prove the fabric (InfiniBand, GPUDirect RDMA, NVLink). Thin over opsctl.preflight."""

from __future__ import annotations

import json
import time

import click

from opsctl.cli.common import config_path


@click.command("preflight")
@click.argument("nodeset", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Table: list every verdict, not only problems.")
@click.option(
    "--fabric",
    is_flag=True,
    help="Also the fabric: IB port state, NVLink fabric, GPU/HCA pairing, DCGM and NCCL on idle nodes, "
    "ib_write_bw per rail between pairs of nodes (docs/fabric.md).",
)
@click.option(
    "--remediate", is_flag=True, help="With --fabric: drain the failing nodes through the health policy."
)
@click.pass_context
def preflight(
    ctx: click.Context, nodeset: str | None, as_json: bool, show_all: bool, fabric: bool, remediate: bool
) -> None:
    """Check each node's GPUs, HCAs, NVMe, NUMA affinity and Slurm GRES against [preflight].

    Read-only unless --remediate. Exit 0 conformant (OK or WARN), 1 a FAIL (a node, a link, or
    NCCL across the set), 2 usage or config error, 3 unknown.
    """
    from opsctl.errors import UsageError
    from opsctl.preflight import service

    if remediate and not fabric:
        raise UsageError("--remediate needs --fabric")
    pctx = service.load_context(config_path(ctx))
    nodes = service.resolve_nodes(pctx, nodeset)
    if not fabric:
        result = service.run_preflight(pctx, nodes)
        if as_json:
            click.echo(json.dumps(result.to_json(), indent=1, sort_keys=True))
        else:
            from opsctl.health.render import render

            render(result, show_all=show_all, title="opsctl preflight")
        ctx.exit(result.exit_code)
    from opsctl.preflight import fabric as fabric_mod

    now = time.time()
    fres = fabric_mod.run_fabric(pctx, nodes, now=now)
    if remediate:
        fabric_mod.remediate(pctx, fres, f"pf{int(now)}", now=now)
    if as_json:
        click.echo(json.dumps(fres.to_json(), indent=1, sort_keys=True))
    else:
        from opsctl.preflight.render import render_fabric

        render_fabric(fres, show_all=show_all)
    ctx.exit(fres.exit_code)
