"""Helpers that run whole jobs through `opsctl launch rl-run --local` as real processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tiny_job import TINY_JOB

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
MOE_DEMO = ROOT / "training" / "configs" / "moe-demo.toml"

FAST = TINY_JOB


def launch_argv(output: Path, overrides: list[str], resume: bool = False, job: Path = DEMO) -> list[str]:
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--local", "--output", str(output)]
    if resume:
        return [*argv, "--resume"]
    argv += ["--job", str(job)]
    for o in overrides:
        argv += ["-o", o]
    return argv


class Job:
    """A launcher in its own process group, so a test can kill the whole job like a node failure."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
