"""A simulated cluster that gives every dashboard something to show: 4 nodes with monitoring (the
production prometheus.yml and counters file), the remediation service in shadow mode, faults on
three nodes, and a real RL training run scraped through the prometheus role's file_sd job.

Used by tests/integration/dashboards (every panel returns data) and dashboards/pictures.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from opsctl.errors import OpsctlError
from opsctl.sim import monitoring
from opsctl.sim.cluster import SimCluster

ROOT = Path(__file__).resolve().parents[1]
NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "prometheus")
# Faults that give the panels which show only trouble something to show.
FAULTS = {
    "gpu-001": ["busy"],  # a training load: utilisation, power, HCA traffic
    "gpu-002": ["xid=79,gpu=3"],  # XIDs, the last-XID table, a FAIL verdict
    "gpu-003": ["thermal,gpu=1", "ecc_sbe,gpu=2"],  # throttling, correctable ECC
    "gpu-004": ["ib_down=mlx5_1"],  # a port not ACTIVE and below NDR
}
# A short RL run that keeps running (and checkpointing) while Prometheus scrapes it.
TRAINING = [
    "sft.steps=20", "sft.num_demos=64", "eval.size=4", "orchestrator.batch_groups=4",
    "orchestrator.group_size=4", "inference.max_tokens=4", "trainer.steps=100000",
    "trainer.checkpoint_every=5", "env.kwargs={digits = 2, num_train = 400, num_eval = 20}",
]  # fmt: skip
RUN_NAME = "demo"


class LiveError(OpsctlError):
    """The live cluster could not be brought up."""


@dataclass
class Live:
    sim: SimCluster
    prometheus_url: str
    work: Path


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def live_cluster(work: Path, announce_timeout: float = 600.0) -> Iterator[Live]:
    """Everything up and scraped; all of it stopped on the way out, whatever happened."""
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        raise LiveError(f"missing programs: {', '.join(missing)} (scripts/bootstrap.sh installs them)")
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="live", dir="/tmp"))
    sim = SimCluster(nodes=4, state_dir=state_dir, addons=["monitoring"])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sim.up()
        info = monitoring.load_info(sim)
        assert info is not None
        # the service judges and reports, in shadow mode: the faults below drain nothing
        sim.set_config("health", shadow=True, stale_after=15.0, window_seconds=60,
                       state_file=str(work / "state.json"), decision_log=str(work / "decisions.jsonl"))
        sim.set_config("remediator", interval=2.0, pause_file=str(work / "paused.json"),
                       status_file=str(work / "status.json"), alertmanager_url="")  # fmt: skip
        with open(work / "remediator.log", "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "opsctl", "--config", str(sim.config_path), "remediator", "run"],
                env=sim.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
        run = work / "run"
        argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--local", "--output", str(run),
                "--config", str(ROOT / "training" / "configs" / "demo.toml")]  # fmt: skip
        for o in TRAINING:
            argv += ["-o", o]
        with open(work / "launch.log", "wb") as log:
            procs.append(subprocess.Popen(
                argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            ))  # fmt: skip
        for node, faults in FAULTS.items():
            for fault in faults:
                monitoring.inject(sim, node, fault)
        # the run announces its metrics endpoints in peers/; point Prometheus at them (file_sd)
        deadline = time.monotonic() + announce_timeout
        announced = {c: run / "peers" / f"metrics-{c}.json" for c in ("trainer", "orchestrator")}
        while not all(p.exists() for p in announced.values()):
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                tail = (work / "launch.log").read_text()[-2000:]
                raise LiveError(f"the training run announced no metrics: {tail}")
            time.sleep(1)
        urls = {c: json.loads(p.read_text())["url"] for c, p in announced.items()}
        monitoring.add_training_targets(sim, RUN_NAME, urls)
        yield Live(sim, info.prometheus_url, work)
    finally:
        _stop(procs)
        try:
            sim.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
