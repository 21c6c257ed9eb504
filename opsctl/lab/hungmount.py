"""A mount that never answers, inside a lab machine: the lab's stand-in for a hung Lustre or NFS mount.

It is a FUSE mount whose daemon never replies. The kernel queues every request on it (FUSE_INIT
first), so a ``stat -f`` of the path blocks until its caller is killed, as on a network filesystem
whose servers went away. A holder process opens ``/dev/fuse`` on the host, enters the machine's mount
namespace, mounts there and then only keeps the descriptor open. Healing kills the holder (pending
requests fail with ENOTCONN) and detaches the mount.

Lab only: the lab's kernel can do FUSE, not Lustre or NFS; what hangs is the kernel's filesystem
boundary, which is what the health probe (``timeout stat -f``) meets on a real hung mount.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from opsctl.errors import OpsctlError, UsageError
from opsctl.lab.config import LabConfig, Machine
from opsctl.lab.machines import running

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV = 0x2, 0x4
MNT_DETACH = 0x2
FSTYPE = "fuse.opsctl-hung"


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _enter_mount_ns(pid: int) -> None:
    fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    try:
        if _libc().setns(fd, CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the mount namespace of {pid}")
    finally:
        os.close(fd)


def machine_pid(cfg: LabConfig, machine: Machine) -> int:
    """The machine's init (systemd inside the container): the process whose mount namespace is the
    machine's. Found below the nspawn process of that machine."""
    proc = next((p for p in running(cfg) if p.machine == machine.name), None)
    if proc is None:
        raise UsageError(f"{machine.name} is not running (opsctl lab up)")
    ours = os.readlink("/proc/self/ns/mnt")
    todo = [proc.pid]
    while todo:
        pid = todo.pop(0)
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if os.readlink(f"/proc/{pid}/ns/mnt") != ours:
                return pid
        except OSError:
            continue
        todo += [int(c) for c in children]
    raise OpsctlError(f"{machine.name}: no process in its own mount namespace below nspawn {proc.pid}")


def _registry(cfg: LabConfig, node: str) -> Path:
    return cfg.machine_dir(node) / "hung-mounts.json"


def _load(cfg: LabConfig, node: str) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(_registry(cfg, node).read_text()).items()}
    except (OSError, ValueError):
        return {}


def held(cfg: LabConfig, node: str) -> list[str]:
    """The machine's hung mounts (paths)."""
    return sorted(_load(cfg, node))


def hang(cfg: LabConfig, machine: Machine, path: str) -> int:
    """Mount a never-answering filesystem at ``path`` inside the machine; returns the holder's pid."""
    if not path.startswith("/") or path == "/" or ".." in path.split("/"):
        raise UsageError(f"mount_hung: an absolute path below / is needed (got {path!r})")
    held = _load(cfg, machine.name)
    if path in held:
        return held[path]
    pid = machine_pid(cfg, machine)
    holder = subprocess.Popen(
        [sys.executable, "-m", "opsctl.lab.hungmount", "hold", str(pid), path],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # outlives the command that made it; heal ends it
    )
    assert holder.stdout is not None
    line = holder.stdout.readline().strip()
    if line != "mounted":
        err = holder.stderr.read() if holder.stderr else ""
        holder.kill()
        raise OpsctlError(f"mount_hung {path} on {machine.name} failed: {err.strip()[-300:] or line}")
    held[path] = holder.pid
    _registry(cfg, machine.name).write_text(json.dumps(held))
    return holder.pid


def release(cfg: LabConfig, machine: Machine) -> list[str]:
    """End every hung mount of the machine; returns their paths."""
    held = _load(cfg, machine.name)
    if not held:
        return []
    for holder in held.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder, signal.SIGKILL)
    pid = machine_pid(cfg, machine)
    for path in held:
        subprocess.run([sys.executable, "-m", "opsctl.lab.hungmount", "detach", str(pid), path],
                       capture_output=True, timeout=30, check=False)
    _registry(cfg, machine.name).unlink(missing_ok=True)
    return sorted(held)


def _hold(pid: int, path: str) -> int:
    fuse = os.open("/dev/fuse", os.O_RDWR)  # opened in the host's namespace, where /dev/fuse is
    _enter_mount_ns(pid)
    os.makedirs(path, exist_ok=True)
    data = f"fd={fuse},rootmode=40000,user_id=0,group_id=0".encode()
    if _libc().mount(b"opsctl-hung", path.encode(), FSTYPE.encode(), MS_NOSUID | MS_NODEV, data) != 0:
        err = ctypes.get_errno()
        sys.stderr.write(f"mount {path}: {os.strerror(err)}\n")
        return 1
    sys.stdout.write("mounted\n")
    sys.stdout.flush()
    while True:  # answer nothing, ever: every request on the mount waits
        time.sleep(3600)


def _detach(pid: int, path: str) -> int:
    _enter_mount_ns(pid)
    if _libc().umount2(path.encode(), MNT_DETACH) != 0:
        sys.stderr.write(f"umount {path}: {os.strerror(ctypes.get_errno())}\n")
        return 1
    return 0


if __name__ == "__main__":
    verb, target, where = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sys.exit(_hold(target, where) if verb == "hold" else _detach(target, where))
