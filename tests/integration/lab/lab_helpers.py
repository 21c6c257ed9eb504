"""Helpers shared by the lab integration tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from opsctl.lab.config import LabConfig

GPU_NODES = 2


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

    def ssh(self, node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        from opsctl.lab.ssh import ssh

        return ssh(self.cfg, self.cfg.machine(node), list(command), check=False, timeout=timeout)


@dataclass
class Converged:
    first: object
    second: object


def lab_status(lab: RunningLab) -> dict[str, object]:
    data = json.loads(lab.opsctl("status", "--json", check=False).stdout)
    assert isinstance(data, dict)
    return data
