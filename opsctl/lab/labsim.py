"""Simulated H200 hardware inside the lab's GPU machines (lab only, never through the roles).

At `lab up` each GPU machine's upper dir gets, under /opt/opsctl-labsim, a copy of opsctl.hwsim
and of prometheus_client (the machine's python3 has no pip packages), wrapper scripts in
/usr/local/bin (`nvidia-smi`, `ibstat`, `dcgmi`, `perfquery`), and a systemd unit serving the
emulated dcgm-exporter on port 9400. The node's hardware state is a JSON file in a host directory
bind-mounted at /var/lib/opsctl-labsim, so `lab inject`/`lab heal` edit it from the host and the
tools and the exporter see the change on their next read.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from opsctl.errors import ConfigError
from opsctl.lab.config import LabConfig, Machine

if TYPE_CHECKING:
    from opsctl.hwsim.state import NodeHardware

LABSIM_ROOT = "/opt/opsctl-labsim"
STATE_MOUNT = "/var/lib/opsctl-labsim"
EXPORTER_PORT = 9400
EXPORTER_UNIT = "opsctl-labsim-dcgm-exporter.service"
# The hwsim contract (docs/simulated-hardware.md): tools read the state file named by this variable.
STATE_ENV = "OPSCTL_HWSIM_STATE"
TOOLS_MODULE = "opsctl.hwsim.tools"
EXPORTER_MODULE = "opsctl.hwsim.exporter"
TOOLS = ("nvidia-smi", "ibstat", "dcgmi", "perfquery")
SYSFS_SUBDIR = "sys/class/infiniband"  # rendered IB sysfs tree, under the state mount


def host_state_dir(cfg: LabConfig, machine: str) -> Path:
    return cfg.machine_dir(machine) / "hwsim"


def node_state_file(machine: str) -> str:
    return f"{STATE_MOUNT}/{machine}.json"


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{module} is not installed here; the lab cannot simulate hardware without it")
    return Path(next(iter(spec.submodule_search_locations)))


def render_wrapper(tool: str, machine: str) -> str:
    return (
        "#!/bin/sh\n"
        f"# opsctl lab: SIMULATED {tool}; this machine has no GPU or HCA. Lab only, never in production.\n"
        f"{STATE_ENV}=${{{STATE_ENV}:-{node_state_file(machine)}}}\n"
        f"export {STATE_ENV}\n"
        f'PYTHONPATH={LABSIM_ROOT}/lib exec /usr/bin/python3 -m {TOOLS_MODULE} {tool} "$@"\n'
    )


def render_exporter_unit(machine: str) -> str:
    return (
        "[Unit]\n"
        "Description=opsctl lab: emulated dcgm-exporter (SIMULATED H200 hardware, lab only)\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        f"Environment=PYTHONPATH={LABSIM_ROOT}/lib\n"
        f"Environment={STATE_ENV}={node_state_file(machine)}\n"
        f"ExecStart=/usr/bin/python3 -m {EXPORTER_MODULE} --state {node_state_file(machine)}"
        f" --port {EXPORTER_PORT}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def _copy_package(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def install(cfg: LabConfig, machine: Machine, upper: Path) -> None:
    """Put the simulators into a GPU machine's upper dir and create its healthy hardware state."""
    _package_dir("opsctl.hwsim")  # a clear ConfigError before anything is written
    from opsctl.hwsim import state as hwstate

    lib = upper / LABSIM_ROOT.lstrip("/") / "lib"
    opsctl_src = _package_dir("opsctl")
    (lib / "opsctl").mkdir(parents=True, exist_ok=True)
    # Only what hwsim imports: the package root, its errors and hwsim itself.
    for name in ("__init__.py", "errors.py"):
        shutil.copy2(opsctl_src / name, lib / "opsctl" / name)
    _copy_package(opsctl_src / "hwsim", lib / "opsctl" / "hwsim")
    _copy_package(_package_dir("prometheus_client"), lib / "prometheus_client")
    bindir = upper / "usr/local/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        path = bindir / tool
        path.write_text(render_wrapper(tool, machine.name))
        path.chmod(0o755)
    units = upper / "etc/systemd/system"
    (units / "multi-user.target.wants").mkdir(parents=True, exist_ok=True)
    (units / EXPORTER_UNIT).write_text(render_exporter_unit(machine.name))
    link = units / "multi-user.target.wants" / EXPORTER_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{EXPORTER_UNIT}")
    state_dir = host_state_dir(cfg, machine.name)
    state = hwstate.ensure_node(state_dir, machine.name)
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
