"""Helpers shared by the lab integration tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from opsctl.lab.config import LabConfig
from opsctl.lab.converge import ConvergeResult, parse_recap

GPU_NODES = ["gpu-001", "gpu-002", "gpu-003"]  # the shared lab's GPU machines (conftest.py)
T = TypeVar("T")


@dataclass
class RunningLab:
    cfg: LabConfig
    inventory: Path
    env: dict[str, str]

    def opsctl(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", "lab", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"opsctl lab {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def opsctl_cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`opsctl ARGS` on the host against the lab (after `lab connect`); AssertionError on failure."""
        env = dict(self.env, OPSCTL_CONFIG=str(self.cfg.state_dir / "opsctl.toml"))
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"opsctl {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def ssh(self, node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        from opsctl.lab.ssh import ssh

        return ssh(self.cfg, self.cfg.machine(node), list(command), check=False, timeout=timeout)


@dataclass
class Converged:
    first: ConvergeResult
    second: ConvergeResult


def lab_status(lab: RunningLab) -> dict[str, object]:
    data = json.loads(lab.opsctl("status", "--json", check=False).stdout)
    assert isinstance(data, dict)
    return data


def playbook(
    lab: RunningLab, book: str, *args: str, env: dict[str, str] | None = None, timeout: float = 1800
) -> ConvergeResult:
    """ansible-playbook -i <lab inventory> BOOK ARGS from the repository root, like `run_playbook`
    but with extra arguments (--check, --limit, -e) and environment (another HOME)."""
    from opsctl.lab.lab import REPO_ROOT

    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env.update({"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(lab.inventory), book, *args],
        cwd=REPO_ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    return ConvergeResult(proc.returncode, parse_recap(output), output)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
    """Poll until probe() returns something truthy; the deadline only bounds waiting, nothing is timed."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"gave up waiting for {what}; last probe: {last!r}")


def explain(lab: RunningLab, result: ConvergeResult) -> str:
    """A failed converge assertion's message: the tasks that changed or failed, then each such
    host's recent Slurm and munge journal (a daemon that died between runs shows up as a change)."""
    parts = [result.report()]
    for host in sorted(set(result.changed_hosts) | set(result.failed_hosts)):
        proc = lab.ssh(
            host, "journalctl", "--no-pager", "-n", "40", "-u", "slurmd", "-u", "slurmctld", "-u", "munge"
        )
        parts.append(f"--- {host}: journal of slurmd/slurmctld/munge ---\n{proc.stdout}{proc.stderr}")
    return "\n".join(parts)
