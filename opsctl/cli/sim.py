"""`opsctl sim up|down|status|stop-slurmd|start-slurmd`: the simulated cluster on this host."""

from __future__ import annotations

import json

import click

from opsctl.errors import EXIT_UNHEALTHY

_state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the cluster keeps its state (default: $OPSCTL_SIM_DIR, else ./.sim).",
)


@click.group("sim")
def sim() -> None:
    """Run a simulated Slurm cluster on this host (real daemons, simulated GPUs)."""


@sim.command("up")
@click.option("--nodes", "-n", type=click.IntRange(1, 512), default=4, show_default=True,
              help="Number of 8-GPU nodes.")
@click.option("--with", "addons", multiple=True, metavar="ADDON",
              help="Also start an add-on (e.g. monitoring); repeatable.")
@_state_dir_option
def up(nodes: int, addons: tuple[str, ...], state_dir: str | None) -> None:
    """Start munged, slurmctld and one slurmd per node; wait until all nodes are idle."""
    from opsctl.nodeset import fold
    from opsctl.sim.cluster import SimCluster

    cluster = SimCluster(nodes=nodes, state_dir=state_dir, addons=addons)
    cluster.up()
    names = cluster.node_names
    click.echo(f"simulated cluster up: {len(names)} nodes ({fold(names)}), state in {cluster.state_dir}")
    click.echo("target it with:")
    click.echo("  export " + " ".join(f"{k}={v}" for k, v in cluster.env_vars.items()))
    click.echo(f"stop it with: opsctl sim down --state-dir {cluster.state_dir}")


@sim.command("down")
@_state_dir_option
def down(state_dir: str | None) -> None:
    """Stop every daemon of the simulated cluster (idempotent)."""
    from opsctl.sim.cluster import SimCluster

    cluster = SimCluster(state_dir=state_dir)
    cluster.down()
    click.echo(f"simulated cluster in {cluster.state_dir} is down")


@sim.command("status")
@_state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, state_dir: str | None, as_json: bool) -> None:
    """Show the daemons and add-ons; exit 1 if the cluster is not (fully) running."""
    from opsctl.sim.cluster import SimCluster

    report = SimCluster(state_dir=state_dir).status()
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        word = "running" if report.running else "not running"
        click.echo(f"simulated cluster in {report.state_dir}: {word}, {len(report.nodes)} nodes, "
                   f"{report.rss_kib / 1024:.0f} MiB RSS")
        for proc in report.processes:
            click.echo(f"  {proc.name:<24} pid {proc.pid:<8} {'up' if proc.alive else 'DEAD'}")
        for name, info in report.addons.items():
            click.echo(f"  add-on {name}: {json.dumps(info, sort_keys=True)}")
    if not report.running:
        ctx.exit(EXIT_UNHEALTHY)


@sim.command("stop-slurmd")
@click.argument("node")
@_state_dir_option
def stop_slurmd(node: str, state_dir: str | None) -> None:
    """Fault drill: stop one node's slurmd (Slurm marks it not responding, then down)."""
    from opsctl.sim.cluster import SimCluster

    SimCluster(state_dir=state_dir).stop_slurmd(node)
    click.echo(f"stopped slurmd of {node}")


@sim.command("start-slurmd")
@click.argument("node")
@_state_dir_option
def start_slurmd(node: str, state_dir: str | None) -> None:
    """Start one node's slurmd again."""
    from opsctl.sim.cluster import SimCluster

    SimCluster(state_dir=state_dir).start_slurmd(node)
    click.echo(f"started slurmd of {node}")


# Fault drills on the simulated hardware (opsctl/cli/sim_faults.py, owned by hwsim).
from opsctl.cli.sim_faults import register as _register_faults  # noqa: E402

_register_faults(sim)
