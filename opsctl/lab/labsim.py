"""Simulated H200 hardware inside the lab's GPU machines (lab only, never through the roles).

At `lab up` each GPU machine's upper dir gets hwsim's tool shims (`nvidia-smi`, `ibstat`,
`perfquery`, `dcgmi`, `dmesg` in /usr/local/bin, with a copy of opsctl.hwsim under
/opt/opsctl-labsim/lib: stdlib only, as the machine's python3 has no pip packages) and a systemd
unit serving the emulated dcgm-exporter on port 9400. The emulated exporter reads the counters file
the dcgm role's converge writes (/etc/dcgm-exporter/default-counters.csv): a path unit starts it
once that file exists, and it serves only the fields listed there. The machine's real
node_exporter (the node_exporter role) serves the node's own series; it finds no InfiniBand
hardware, so the lab's Prometheus has no node_infiniband_* series (health over SSH reads the
simulated sysfs tree). The node's hardware state lives in a host directory bind-mounted at
/var/lib/hwsim (`<node>.json`, with `state.json` pointing at it, the shims' default), so
`lab inject`/`lab heal` edit it from the host and the tools and the exporter see the change on
their next read.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from opsctl.lab.config import LabConfig, Machine

if TYPE_CHECKING:
    from opsctl.hwsim.state import NodeHardware

LABSIM_ROOT = "/opt/opsctl-labsim"
STATE_MOUNT = "/var/lib/hwsim"  # hwsim's default state location (state.json)
EXPORTER_PORT = 9400
EXPORTER_UNIT = "opsctl-labsim-dcgm-exporter.service"
EXPORTER_PATH_UNIT = "opsctl-labsim-dcgm-exporter.path"
EXPORTER_MODULE = "opsctl.hwsim.exporter"
COLLECTORS = "/etc/dcgm-exporter/default-counters.csv"  # the dcgm role's dcgm_exporter_collectors
SYSFS_SUBDIR = "sys/class/infiniband"  # rendered IB sysfs tree, under the state mount


def host_state_dir(cfg: LabConfig, machine: str) -> Path:
    return cfg.machine_dir(machine) / "hwsim"


def render_exporter_unit(machine: str) -> str:
    return (
        "[Unit]\n"
        "Description=opsctl lab: emulated dcgm-exporter (SIMULATED H200 hardware, lab only)\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        f"Environment=PYTHONPATH={LABSIM_ROOT}/lib\n"
        f"ExecStart=/usr/bin/python3 -m {EXPORTER_MODULE} --state-dir {STATE_MOUNT}"
        f" --node {machine}={EXPORTER_PORT} --serve dcgm --collectors {COLLECTORS} --listen 0.0.0.0\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
    )


def render_exporter_path_unit() -> str:
    """Starts the exporter once the converge has written its counters file (at boot, if it is
    already there); before that there is nothing it could serve."""
    return (
        "[Unit]\n"
        "Description=opsctl lab: start the emulated dcgm-exporter once its counters file exists\n"
        "\n"
        "[Path]\n"
        f"PathExists={COLLECTORS}\n"
        f"Unit={EXPORTER_UNIT}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def install(cfg: LabConfig, machine: Machine, upper: Path) -> None:
    """Put the simulators into a GPU machine's upper dir and create its healthy hardware state."""
    from opsctl.hwsim import state as hwstate
    from opsctl.hwsim.tools import install_shims

    lib = upper / LABSIM_ROOT.lstrip("/") / "lib"
    install_shims(upper / "usr/local/bin", lib, lib_dir_in_machine=f"{LABSIM_ROOT}/lib")
    units = upper / "etc/systemd/system"
    (units / "multi-user.target.wants").mkdir(parents=True, exist_ok=True)
    (units / EXPORTER_UNIT).write_text(render_exporter_unit(machine.name))
    (units / EXPORTER_PATH_UNIT).write_text(render_exporter_path_unit())
    (units / "multi-user.target.wants" / EXPORTER_UNIT).unlink(missing_ok=True)  # started by the path unit
    link = units / "multi-user.target.wants" / EXPORTER_PATH_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{EXPORTER_PATH_UNIT}")
    state_dir = host_state_dir(cfg, machine.name)
    state = hwstate.ensure_node(state_dir, machine.name)
    default = state_dir / "state.json"
    if not default.is_symlink():
        default.symlink_to(hwstate.state_path(".", machine.name).name)
    render_sysfs(cfg, machine.name, state)


def render_sysfs(cfg: LabConfig, machine: str, state: NodeHardware) -> None:
    from opsctl.hwsim import render_ib

    root = host_state_dir(cfg, machine) / SYSFS_SUBDIR
    shutil.rmtree(root, ignore_errors=True)
    render_ib.write_sysfs_tree(state, root)


def bind_args(cfg: LabConfig, machine: Machine) -> list[str]:
    if machine.role != "gpu":
        return []
    return [f"--bind={host_state_dir(cfg, machine.name)}:{STATE_MOUNT}"]
