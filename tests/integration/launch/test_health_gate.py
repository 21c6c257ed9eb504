"""The launch health gate on the simulated cluster with its monitoring (emulated DCGM/node
exporters scraped by a real Prometheus): a node with an injected XID is left out of the launch,
and a launch that needs it is refused with the reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_sim_helpers import DEMO, ROOT, launch_toml

from opsctl.sim import monitoring
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def monitored() -> Iterator[tuple[SimCluster, Path]]:
    if shutil.which("prometheus") is None:
        pytest.fail("the health gate test needs prometheus (scripts/bootstrap.sh)", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="lgate", dir="/tmp"))  # munge's socket path must stay short
    sim = SimCluster(nodes=4, state_dir=root / "s", addons=["monitoring"])
    try:
        sim.up()
        config = root / "opsctl.toml"
        section = launch_toml(root).replace('health_source = "none"', 'health_source = "prometheus"')
        config.write_text(sim.config_path.read_text() + section)
        yield sim, config
    finally:
        sim.down()
        shutil.rmtree(root, ignore_errors=True)


def dry_run(sim: SimCluster, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**sim.env, "OPSCTL_CONFIG": str(config)}
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--job", str(DEMO), "--dry-run", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)


def test_unhealthy_node_is_excluded_or_the_launch_refused(monitored: tuple[SimCluster, Path]) -> None:
    sim, config = monitored
    monitoring.inject(sim, "gpu-002", "xid=79,gpu=3")
    deadline = time.monotonic() + 90  # Prometheus scrapes every few seconds
    out = dry_run(sim, config, "--nodes", "3")
    while "gpu-002 (unhealthy" not in out.stdout and time.monotonic() < deadline:
        time.sleep(2)
        out = dry_run(sim, config, "--nodes", "3")
    assert out.returncode == 0, out.stderr
    assert "gpu-002 (unhealthy: FAIL gpu-xid" in out.stdout
    assert "#SBATCH --exclude=gpu-002\n" in out.stdout
    refused = dry_run(sim, config, "--nodes", "4")
    assert refused.returncode == 2
    assert refused.stderr.startswith("opsctl: error: refusing to launch: 4 nodes needed, 3 of 4")
    assert "gpu-002 (unhealthy: FAIL gpu-xid" in refused.stderr


def start(sim: SimCluster, config: Path, run: Path, steps: int) -> subprocess.CompletedProcess[str]:
    from launch_sim_helpers import TINY

    env = {**sim.env, "OPSCTL_CONFIG": str(config)}
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--job", str(DEMO), "--output", str(run),
            "-o", f"trainer.steps={steps}", "-o", "trainer.checkpoint_every=5"]
    for o in TINY:
        argv += ["-o", o]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)


def watch(sim: SimCluster, config: Path, run: Path, *args: str, log: Path) -> subprocess.Popen[str]:
    env = {**sim.env, "OPSCTL_CONFIG": str(config)}
    with log.open("w") as fh:
        return subprocess.Popen([sys.executable, "-m", "opsctl", "watch", "--remediate", "--interval", "1",
                                 *args, str(run)], stdout=fh, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=ROOT)


def freeze(sim: SimCluster, run: Path) -> None:
    """A GPU that falls off the bus (XID 79) hangs the job's collectives rather than ending it.
    Suspending the job models that hang and keeps a fast machine from finishing the run before
    Prometheus scrapes the fault, so the outcome does not depend on machine speed."""
    from opsctl.launch.ledger import load_ledger

    job = load_ledger(run).job_ids[-1]
    subprocess.run(["scontrol", "suspend", str(job)], env=sim.env, check=True, capture_output=True)


def victim_after_step(run: Path, step: int) -> str:
    """The trainer node of attempt 0, once the trainer has logged `step`."""
    from opsctl.watch import trainer_steps

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        started = (run / "attempts" / "0.json").exists()
        if started and any(s >= step for s in trainer_steps(run / "metrics.jsonl")):
            import json

            return str(json.loads((run / "attempts" / "0.json").read_text())["nodes"][1])
        time.sleep(0.3)
    raise AssertionError(f"the run did not reach step {step}")


@pytest.mark.slow
def test_health_failure_mid_run_is_remediated(monitored: tuple[SimCluster, Path], tmp_path: Path) -> None:
    from opsctl.launch.ledger import load_ledger

    sim, config = monitored
    run = config.parent / "runs" / "xid"
    assert start(sim, config, run, 60).returncode == 0
    proc = watch(sim, config, run, "--json", log=tmp_path / "w.jsonl")
    try:
        victim = victim_after_step(run, 7)
        freeze(sim, run)
        monitoring.inject(sim, victim, "xid=79,gpu=3")  # GPU fell off the bus: fatal
        assert proc.wait(timeout=420) == 0, (tmp_path / "w.jsonl").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    led = load_ledger(run)
    assert led.final_state == "COMPLETED" and len(led.attempts) == 2
    assert led.attempts[0].failed_nodes == [victim] and victim not in led.attempts[1].nodes
    assert led.attempts[1].resume_step >= 5
    drained = [r for r in led.remediations if r.action == "drained"]
    assert [r.node for r in drained] == [victim] and "health FAIL gpu-xid" in drained[0].why


def test_watch_gives_up_after_max_attempts(monitored: tuple[SimCluster, Path], tmp_path: Path) -> None:
    from opsctl.launch.ledger import load_ledger

    sim, config = monitored
    config.write_text(config.read_text().replace("max_attempts = 3", "max_attempts = 1"))
    run = config.parent / "runs" / "giveup"
    assert start(sim, config, run, 200).returncode == 0
    log = tmp_path / "w.txt"
    proc = watch(sim, config, run, log=log)
    try:
        victim = victim_after_step(run, 3)
        freeze(sim, run)
        monitoring.inject(sim, victim, "xid=79,gpu=0")
        assert proc.wait(timeout=300) == 1, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "GAVE_UP after 1 attempt(s)" in text and "launch.max_attempts=1" in text
    led = load_ledger(run)
    assert led.final_state == "GAVE_UP" and len(led.job_ids) == 1
    assert {(r.node, r.action) for r in led.remediations} >= {(victim, "drained"), (victim, "quarantined"),
                                                              (victim, "gave-up")}
    squeue = subprocess.run(["squeue", "-h", "-t", "PD,R", "-j", str(led.job_ids[0])], capture_output=True,
                            text=True, env=sim.env, check=False)
    assert squeue.stdout.strip() == ""  # cancelled
