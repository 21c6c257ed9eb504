"""SSH from the host into lab machines with the lab's own key (argv lists, never a shell string)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

from opsctl.lab.config import LabConfig, Machine
from opsctl.lab.shell import run

SSH_OPTIONS: tuple[str, ...] = (
    "-o", "BatchMode=yes",
    "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR",
    "-o", "ConnectTimeout=3",
)  # fmt: skip


def ssh_argv(cfg: LabConfig, machine: Machine, command: Sequence[str]) -> list[str]:
    # ssh hands the remote shell one string; quoting each word makes it split back into exactly
    # `command`, so no argument is ever interpreted by that shell.
    remote = shlex.join(command)
    return ["ssh", "-i", str(cfg.ssh_key), *SSH_OPTIONS, f"root@{machine.address}", "--", remote]


def ssh(
    cfg: LabConfig, machine: Machine, command: Sequence[str], *, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return run(ssh_argv(cfg, machine, command), check=check, timeout=timeout)


def system_state(cfg: LabConfig, machine: Machine) -> str:
    """systemd's view of the machine ('running', 'degraded', 'starting'...) or 'unreachable'."""
    try:
        proc = ssh(cfg, machine, ["systemctl", "is-system-running"], check=False, timeout=10)
    except Exception:
        return "unreachable"
    if proc.returncode == 255:
        return "unreachable"
    return proc.stdout.strip() or "unknown"
