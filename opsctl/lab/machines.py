"""Booting and stopping the lab's systemd-nspawn machines.

Each machine boots the shared base image as its lower layer with its own upper directory
(--overlay), on the lab bridge, unregistered (--register=no --keep-unit: there is no system bus on
the host). The running nspawn processes themselves are the source of truth for what is up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opsctl.lab import labsim, netconf, packages
from opsctl.lab.config import LabConfig, Machine

# Stand-ins for the shared filesystems: host directories bind-mounted into every machine.
SHARED_MOUNTS: dict[str, str] = {"nfs": "/shared", "lustre": "/lustre"}
STANDIN_NOTE = (
    "STAND-IN: this directory is a host bind mount made by `opsctl lab up`, not a {kind} mount.\n"
    "The lab cannot exercise {kind} clients; see docs/lab.md.\n"
)


@dataclass(frozen=True)
class NspawnProcess:
    pid: int
    machine: str
    upper: str = ""  # the overlay upper dir, which says which state dir the machine belongs to


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _symlink(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def prepare_upper(cfg: LabConfig, machine: Machine, public_key: str) -> Path:
    """The machine's own files, written before boot into its overlay upper directory."""
    upper = cfg.upper_dir(machine.name)
    upper.mkdir(parents=True, exist_ok=True)
    _write(upper / "etc/hostname", machine.name + "\n")
    _write(upper / "etc/hosts", netconf.render_hosts(cfg))
    _write(upper / "etc/resolv.conf", "")
    _write(upper / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    _write(upper / netconf.NETWORK_FILE, netconf.render_network(cfg, machine))
    system = upper / "etc/systemd/system"
    _symlink(
        system / "multi-user.target.wants/systemd-networkd.service",
        "/lib/systemd/system/systemd-networkd.service",
    )
    _symlink(
        system / "sockets.target.wants/systemd-networkd.socket", "/lib/systemd/system/systemd-networkd.socket"
    )
    ssh_dir = upper / "root/.ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    ssh_dir.chmod(0o700)
    (upper / "root").chmod(0o700)
    _write(ssh_dir / "authorized_keys", public_key.strip() + "\n", 0o600)
    if machine.role == "gpu":
        _write(upper / "etc/tmpfiles.d/opsctl-labsim-nvidia.conf", netconf.render_nvidia_tmpfiles())
    _write(upper / "etc/apt/sources.list.d" / packages.LOCAL_SOURCES_FILE, packages.render_sources_list())
    return upper


def repo_dir(cfg: LabConfig) -> Path:
    """The lab's own flat apt repository (packages.build_sim_package), shared by every machine."""
    return cfg.state_dir / "repo"


def prepare_shared(cfg: LabConfig) -> dict[str, Path]:
    if not (repo_dir(cfg) / "Packages").exists():
        packages.write_repo_index(repo_dir(cfg))
    out = {}
    for kind, _mountpoint in SHARED_MOUNTS.items():
        d = cfg.shared_dir / kind
        d.mkdir(parents=True, exist_ok=True)
        (d / "README.LAB-STANDIN").write_text(STANDIN_NOTE.format(kind=kind.upper()))
        out[kind] = d
    return out


def nspawn_argv(cfg: LabConfig, machine: Machine, rootfs: Path) -> list[str]:
    argv = [
        "systemd-nspawn",
        "--quiet",
        "--register=no",
        "--keep-unit",
        "--boot",
        f"--machine={machine.name}",
        f"--overlay={rootfs}:{cfg.upper_dir(machine.name)}:/",
        f"--directory={rootfs}",
        f"--network-bridge={cfg.bridge}",
        "--console=read-only",
    ]
    for kind, mountpoint in SHARED_MOUNTS.items():
        argv.append(f"--bind={cfg.shared_dir / kind}:{mountpoint}")
    argv.append(f"--bind-ro={repo_dir(cfg)}:{packages.LOCAL_REPO_MOUNT}")
    return argv + labsim.bind_args(cfg, machine)


# nspawn exits with 133 when the machine reboots (systemd-nspawn@.service restarts on it); this
# loop boots it again, as long as the machine's upper dir still exists (`lab down` removes it).
_REBOOT_LOOP = (
    'upper=$1; shift; while :; do "$@"; rc=$?; '
    'if [ "$rc" -ne 133 ] || [ ! -d "$upper" ]; then exit "$rc"; fi; done'
)


def supervised_argv(cfg: LabConfig, machine: Machine, rootfs: Path) -> list[str]:
    """nspawn under a shell that boots the machine again after it reboots itself."""
    return [
        "sh",
        "-c",
        _REBOOT_LOOP,
        f"opsctl-lab-{machine.name}",
        str(cfg.upper_dir(machine.name)),
        *nspawn_argv(cfg, machine, rootfs),
    ]


def boot(cfg: LabConfig, machine: Machine, rootfs: Path) -> int:
    log = cfg.machine_dir(machine.name) / "console.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            supervised_argv(cfg, machine, rootfs),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives `opsctl lab up`; `lab down` stops it
        )
    return proc.pid


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def running(cfg: LabConfig) -> list[NspawnProcess]:
    """nspawn processes on this lab's bridge (found by their argv, so lost state cannot hide them)."""
    found = []
    bridge_arg = f"--network-bridge={cfg.bridge}"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = _cmdline(int(entry))
        if not argv or not argv[0].endswith("systemd-nspawn") or bridge_arg not in argv:
            continue
        name = next((a.split("=", 1)[1] for a in argv if a.startswith("--machine=")), "")
        overlay = next((a.split("=", 1)[1] for a in argv if a.startswith("--overlay=")), "")
        parts = overlay.split(":")
        found.append(NspawnProcess(int(entry), name, parts[1] if len(parts) == 3 else ""))
    return sorted(found, key=lambda p: p.machine)


def _alive(pid: int) -> bool:
    """Running, or a zombie leader whose other threads still run; a finished zombie is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
        return True
    try:
        return any(t != str(pid) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """The direct children of `pid` (nspawn's: the machine's init, PID 1 of its namespace)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return out


def stop(
    processes: list[NspawnProcess],
    *,
    grace: float = 30,
    settle: float = 15,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """SIGTERM makes nspawn power the machine off cleanly; SIGKILL whatever is left after `grace`,
    the machines' inits too (killing a PID namespace's init ends everything in it). Returns once
    nspawn and init are gone, or after `settle` more seconds with the pids that are not."""
    pids = [p.pid for p in processes]
    pids += [c for p in processes for c in _children(p.pid)]  # an init can outlive its nspawn
    for p in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        sleep(0.2)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + settle
    while True:
        for p in processes:  # reap our own children so they do not linger as zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, os.WNOHANG)
        left = [pid for pid in pids if _alive(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        sleep(0.1)
