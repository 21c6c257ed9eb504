"""`opsctl lab`: the nspawn machine lab (up, status, down, inject, heal). Thin over opsctl.lab."""

from __future__ import annotations

import json
from pathlib import Path

import click

from opsctl.errors import EXIT_UNHEALTHY, ConfigError


def _inventory_option(f: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--inventory",
        "inventory_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="OPSCTL_LAB_INVENTORY",
        help="Where to write the generated Ansible inventory (default: inventory/lab in the repo).",
    )(f)


@click.group()
def lab() -> None:
    """systemd-nspawn machines with simulated H200 GPUs and InfiniBand, for tests and drills."""


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Print the image's path and packages as JSON.")
def prepare(as_json: bool) -> None:
    """Build (once) the base image and download the roles' packages into it; boot nothing.

    `lab up` does this first; run it ahead (the bootstrap does, beside pip) to take it off the
    first `up`. A second builder waits for the first one.
    """
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    base = labmod.prepare(from_env())
    if as_json:
        doc = {"rootfs": str(base.rootfs), "packages": list(base.packages)}
        click.echo(json.dumps({**doc, "unavailable": list(base.unavailable)}, indent=2))
        return
    click.echo(
        f"base image ready: {base.rootfs} ({len(base.packages)} packages on disk, "
        f"{len(base.unavailable)} not in Debian: the lab skips their tasks)"
    )


@lab.command()
@click.option(
    "--nodes", "gpu_nodes", type=int, default=3, show_default=True, help="GPU nodes (plus one head)."
)
@click.option("--timeout", type=float, default=180, show_default=True, help="Seconds to wait for boot.")
@click.option("--json", "as_json", is_flag=True, help="Print the lab status as JSON.")
@click.option(
    "--runtime",
    "stage_runtime",
    is_flag=True,
    help="Stage the training runtime's wheelhouse into /shared (site.yml then builds the runtime).",
)
@_inventory_option
def up(
    gpu_nodes: int, timeout: float, as_json: bool, stage_runtime: bool, inventory_dir: Path | None
) -> None:
    """Build (once) the base image, boot head + N GPU machines, write the inventory."""
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    cfg = from_env(gpu_nodes)
    st = labmod.up(cfg, inventory_dir or labmod.LAB_INVENTORY, timeout=timeout, stage_runtime=stage_runtime)
    _print_status(st, as_json)


@lab.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Show the lab's machines, their addresses and boot state. Exit 1 if any is not up."""
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    cfg, inv = labmod.load_config(from_env())
    st = labmod.status(cfg, inv)
    _print_status(st, as_json)
    if not st.up:
        raise click.exceptions.Exit(EXIT_UNHEALTHY)


@lab.command()
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@_inventory_option
def down(dry_run: bool, inventory_dir: Path | None) -> None:
    """Stop every lab machine and remove its veths, bridge, mounts and state."""
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    base = from_env()
    inv: Path | None
    try:
        cfg, inv = labmod.load_config(base)
    except ConfigError:
        # No saved state: still clean up this lab's machines and network by bridge and names, but
        # touch an inventory only when named: the default one may belong to another lab.
        cfg, inv = base, None
    if dry_run:
        for line in labmod.plan_down(cfg, inventory_dir or inv):
            click.echo(f"would {line}")
        return
    done = labmod.down(cfg, inventory_dir or inv)
    for line in done:
        click.echo(line)
    if not done:
        click.echo("lab: nothing to remove")


@lab.command()
@click.argument("node")
@click.argument("fault")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def inject(node: str, fault: str, as_json: bool) -> None:
    """Inject FAULT into NODE's simulated hardware (xid=79, ecc_dbe, gpu_missing=3, ib_down=mlx5_2,
    row_remap_failure, slurmd_stopped, mount_hung=PATH, ...) or fabric (slow_rail=mlx5_3[,gbps=N],
    bad_cable=PEER[,gbps=N], "nvlink_fabric=In Progress")."""
    from opsctl.lab import faults
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    cfg, _inv = labmod.load_config(from_env())
    _print_fault(faults.inject(cfg, node, fault), as_json)


@lab.command()
@click.argument("node")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def heal(node: str, as_json: bool) -> None:
    """Return NODE's simulated hardware to healthy (and restart slurmd if a fault stopped it)."""
    from opsctl.lab import faults
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env

    cfg, _inv = labmod.load_config(from_env())
    _print_fault(faults.heal(cfg, node), as_json)


def _print_fault(result: object, as_json: bool) -> None:
    from dataclasses import asdict

    from opsctl.lab.faults import FaultResult

    assert isinstance(result, FaultResult)
    if as_json:
        click.echo(json.dumps(asdict(result)))
        return
    what = f"injected {result.fault}" if result.action == "inject" else "healed"
    extra = f"; slurmd {result.slurmd}" if result.slurmd else ""
    active = ", ".join(result.active_faults) or "none"
    click.echo(f"{result.node}: {what}{extra} (active faults: {active})")


@lab.command(name="connect")
def connect_cmd() -> None:
    """After site.yml: write an opsctl.toml that reaches the lab's Slurm and Prometheus from here."""
    from opsctl.lab import lab as labmod
    from opsctl.lab.config import from_env
    from opsctl.lab.connect import connect

    cfg, _inv = labmod.load_config(from_env())
    conn = connect(cfg)
    click.echo(f"export OPSCTL_CONFIG={conn.opsctl_toml}")
    click.echo(
        f"# slurm.conf: {conn.slurm_conf} (munge {conn.munge_socket}); prometheus: {conn.prometheus_url}"
    )


def _print_status(st: object, as_json: bool) -> None:
    from rich.table import Table

    from opsctl.console import plain_console
    from opsctl.lab.lab import LabStatus

    assert isinstance(st, LabStatus)
    if as_json:
        click.echo(json.dumps(st.as_dict(), indent=1))
        return
    table = Table(title=f"lab on {st.bridge} ({'up' if st.up else 'NOT up'})")
    for col in ("machine", "address", "role", "pid", "state"):
        table.add_column(col)
    for m in st.machines:
        table.add_row(m.name, m.address, m.role, str(m.pid or "-"), m.state)
    plain_console().print(table)
    click.echo(f"inventory: {st.inventory}")
    if st.stray_veths:
        click.echo(f"stray veths: {', '.join(st.stray_veths)}")
