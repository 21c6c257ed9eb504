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

Each boot of a GPU machine is a boot of its hardware: a oneshot unit (``opsctl-labsim-boot``), before
slurmd and the exporters start, clears what a real reboot clears (hwsim.boot), gives /proc/stat the
boot's own btime and has the boot's first slurmd report the boot (`render_boot_script`). Without it
a container on the host's kernel keeps the host's boot time: an XID from before `scontrol reboot`
would read as this boot's, and slurmctld would never see the node it asked to reboot come back.
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
BOOT_UNIT = "opsctl-labsim-boot.service"
BOOT_SCRIPT = f"{LABSIM_ROOT}/boot.sh"
BOOT_RUN_DIR = "/run/opsctl-labsim"  # a tmpfs: gone at the next boot
SLURMD_BOOT_ENV = f"{BOOT_RUN_DIR}/slurmd.env"
KERNEL_BTIME = f"{BOOT_RUN_DIR}/kernel-btime"  # hwsim.tools.KERNEL_BTIME_FILE
SLURMD_DROPIN = "slurmd.service.d/opsctl-labsim-boot.conf"
# Written by slurmd's first successful start on the machine (persistent, not /run): only a boot
# after that one is a reboot to report. On a fresh machine slurmd -b would report a boot "now" at
# its first registration, and slurmctld, started moments before, would set the node DOWN
# "unexpectedly rebooted" whenever that boot time falls after its own first contact.
SLURMD_HAS_RUN = "/var/lib/opsctl-labsim/slurmd-has-run"
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


def render_boot_script() -> str:
    """What a real boot changes that a container on the host's kernel does not, done once per boot
    before anything reads it: the simulated GPUs and HCAs start again (hwsim.boot), the kernel's
    boot time is this boot's (node_exporter's node_boot_time_seconds reads /proc/stat's btime, the
    host's here; opsctl dates XIDs against it), and the boot's first slurmd reports the boot (slurmd
    takes its boot time from the kernel's uptime, the host's here; without it slurmctld would wait
    out ResumeTimeout for a node it asked to reboot). The copy of /proc/stat keeps the CPU counters
    of this moment: nothing in the lab reads them."""
    return (
        "#!/bin/sh\n"
        "# opsctl lab (SIMULATED H200 hardware, lab only): a new boot; see opsctl/lab/labsim.py\n"
        "set -eu\n"
        f"PYTHONPATH={LABSIM_ROOT}/lib /usr/bin/python3 -m opsctl.hwsim.boot"
        f" --state {STATE_MOUNT}/state.json\n"
        f"mkdir -p {BOOT_RUN_DIR}\n"
        # the running kernel's own btime, saved first: the dmesg shim stamps from it, as the SSH
        # source turns stamps into wall time with that kernel's /proc/uptime (hwsim.tools)
        f"[ -e {KERNEL_BTIME} ] || awk '/^btime /{{print $2}}' /proc/stat > {KERNEL_BTIME}\n"
        f'sed "s/^btime .*/btime $(date +%s)/" /proc/stat > {BOOT_RUN_DIR}/stat\n'
        f"mountpoint -q /proc/stat || mount --bind {BOOT_RUN_DIR}/stat /proc/stat\n"
        # slurmd -b: "report node rebooted when daemon restarted", Slurm's own testing option; only
        # where slurmd ran in an earlier boot (a first start is no reboot)
        f"[ ! -e {SLURMD_HAS_RUN} ] || echo SLURMD_OPTIONS=-b > {SLURMD_BOOT_ENV}\n"
    )


def render_boot_unit() -> str:
    return (
        "[Unit]\n"
        "Description=opsctl lab: a new boot of the simulated hardware (SIMULATED, lab only)\n"
        f"Before=slurmd.service prometheus-node-exporter.service {EXPORTER_UNIT}\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart=/bin/sh {BOOT_SCRIPT}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def render_slurmd_dropin() -> str:
    """The boot's first slurmd start that succeeds takes -b (and consumes it); a restart later in
    the same boot is no boot. That start also records that slurmd has run on this machine."""
    return (
        "# opsctl lab (SIMULATED, lab only): see opsctl-labsim-boot.service\n"
        "[Unit]\n"
        f"After={BOOT_UNIT}\n"
        "\n"
        "[Service]\n"
        f"EnvironmentFile=-{SLURMD_BOOT_ENV}\n"
        f"ExecStartPost=/bin/sh -c 'rm -f {SLURMD_BOOT_ENV}; mkdir -p {SLURMD_HAS_RUN.rsplit('/', 1)[0]};"
        f" touch {SLURMD_HAS_RUN}'\n"
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
    (upper / BOOT_SCRIPT.lstrip("/")).write_text(render_boot_script())
    (units / BOOT_UNIT).write_text(render_boot_unit())
    (units / SLURMD_DROPIN).parent.mkdir(parents=True, exist_ok=True)
    (units / SLURMD_DROPIN).write_text(render_slurmd_dropin())
    for unit in (EXPORTER_PATH_UNIT, BOOT_UNIT):
        link = units / "multi-user.target.wants" / unit
        if not link.is_symlink():
            link.symlink_to(f"/etc/systemd/system/{unit}")
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
