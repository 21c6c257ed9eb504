"""A simulated cluster for launch/watch tests (and bench/bench_launch.py), and helpers to launch
and watch runs on it.

The cluster is the foundation's SimCluster (real munged, slurmctld, four slurmd) with two
timings shortened so a node failure and a requeue fit in a test: SlurmdTimeout (a silent slurmd
is NOT_RESPONDING within seconds) and the credential lifetime, which is also how long Slurm
holds a requeued job before it may start again (120 s by default, 15 s here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiny_job import TINY_JOB

from opsctl.sim.cluster import SimCluster, SimState

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
CRED_EXPIRE_S = 15

TINY = TINY_JOB


class LaunchSim(SimCluster):
    def _write_files(self, state: SimState) -> None:
        super()._write_files(state)
        text = self.slurm_conf.read_text()
        # AuthInfo holds the munge socket; cred_expire rides along as a second option.
        text = text.replace(f"AuthInfo=socket={self.munge_socket}",
                            f"AuthInfo=socket={self.munge_socket},cred_expire={CRED_EXPIRE_S}")
        self.slurm_conf.write_text(text)


@dataclass
class LaunchEnv:
    sim: LaunchSim
    root: Path
    config: Path

    @property
    def env(self) -> dict[str, str]:
        return {**self.sim.env, "OPSCTL_CONFIG": str(self.config)}

    def opsctl_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "opsctl", *args]

    def opsctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.opsctl_argv(*args), capture_output=True, text=True,
                              env=self.env, cwd=ROOT, timeout=timeout, check=False)

    def launch(self, run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = ["launch", "rl-run", "--job", str(DEMO), "--output", str(run_dir)]
        for o in TINY:
            argv += ["-o", o]
        return self.opsctl(*argv, *extra)

    def watch(self, run_dir: Path, *extra: str, log: Path) -> subprocess.Popen[str]:
        fh = log.open("w")
        return subprocess.Popen([sys.executable, "-m", "opsctl", "watch", "--json", "--interval", "1",
                                 *extra, str(run_dir)], stdout=fh, stderr=subprocess.STDOUT, text=True,
                                env=self.env, cwd=ROOT)

    def restore(self, watch: subprocess.Popen[str], killed: str) -> None:
        """The end of a node-death test: stop the watch if still running, start the killed node's
        slurmd again ("": none was killed yet), resume every node and empty the quarantine."""
        if watch.poll() is None:
            watch.kill()
        if killed:
            self.sim.start_slurmd(killed)
            self.sim.reset()
        (self.root / "quarantine.json").unlink(missing_ok=True)

    def squeue(self) -> str:
        return subprocess.run(["squeue", "-h", "-o", "%i %T %R"], capture_output=True, text=True,
                              env=self.env, check=False).stdout


def read_updates(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def launch_toml(root: Path) -> str:
    """The [launch] section for a run on the sim: 2 nodes (1 inference, 1 trainer rank)."""
    return f"""
[launch]
runs_dir = "{root / 'runs'}"
quarantine_file = "{root / 'quarantine.json'}"
nodes = 2
inference_nodes = 1
tasks_per_node = 1
time_limit = "30:00"
signal_before_s = 60
checkpoint_grace_s = 10
python = "{sys.executable}"
workdir = "{ROOT}"
health_source = "none"
ib_sysfs = "{root / 'no-ib'}"
poll_s = 1.0
failure_grace_s = 30.0
max_attempts = 3
"""
