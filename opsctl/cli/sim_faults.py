"""`opsctl sim inject NODE FAULT` and `opsctl sim heal NODE`: fault drills on simulated hardware.

Registered on the `sim` group (opsctl/cli/sim.py). The fault changes the node's simulated hardware
state; the emulated exporters serve it on the next scrape and the tool shims print it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from opsctl.hwsim.state import NodeHardware

_FAULTS_HELP = (
    "FAULT is NAME[=VALUE][,KEY=VALUE...]: xid=N[,gpu=K], ecc_dbe[,gpu=K][,count=N], ecc_sbe[,gpu=K], "
    "row_remap_failure[,gpu=K], gpu_missing=K, ib_down=mlx5_N, nvlink_down[,gpu=K][,link=L], "
    "thermal[,gpu=K], busy[,gpu=K], exporter_down[=all|dcgm|node], slurmd_stopped."
)


def _summary(state: NodeHardware) -> dict[str, object]:
    return {
        "node": state.node,
        "faults": state.faults,
        "gpus_present": len(state.present_gpus),
        "ib_ports_down": [h.name for h in state.hcas if h.state != "Active"],
        "xids": [{"gpu": x.gpu, "xid": x.xid} for x in state.xids],
        "dcgm_exporter_up": state.dcgm_exporter_up,
        "node_exporter_up": state.node_exporter_up,
        "slurmd_up": state.slurmd_up,
    }


_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="The simulated cluster's state directory (default: $OPSCTL_SIM_DIR, else ./.sim).",
)
_dry_run_option = click.option("--dry-run", is_flag=True, help="Show the resulting state; change nothing.")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.command("inject", epilog=_FAULTS_HELP)
@click.argument("node")
@click.argument("fault")
@_state_dir_option
@_dry_run_option
@_json_option
def inject(node: str, fault: str, state_dir: str | None, dry_run: bool, as_json: bool) -> None:
    """Inject FAULT into NODE's simulated hardware (seen on the next Prometheus scrape)."""
    from opsctl.sim import monitoring
    from opsctl.sim.cluster import SimCluster

    state = monitoring.inject(SimCluster(state_dir=state_dir), node, fault, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, **_summary(state)}, indent=2))
    else:
        verb = "would inject" if dry_run else "injected"
        click.echo(f"{verb} {fault} into {node}; its faults now: {', '.join(state.faults)}")


@click.command("heal")
@click.argument("node")
@_state_dir_option
@_dry_run_option
@_json_option
def heal(node: str, state_dir: str | None, dry_run: bool, as_json: bool) -> None:
    """Return NODE's simulated hardware to healthy (and restart its slurmd if a fault stopped it)."""
    from opsctl.sim import monitoring
    from opsctl.sim.cluster import SimCluster

    state = monitoring.heal(SimCluster(state_dir=state_dir), node, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, **_summary(state)}, indent=2))
    else:
        click.echo(f"{'would heal' if dry_run else 'healed'} {node}")


def register(group: click.Group) -> None:
    group.add_command(inject)
    group.add_command(heal)
