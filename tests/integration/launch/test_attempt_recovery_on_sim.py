"""Attempts that end early on a real Slurm: a trainer node dying before the run's first checkpoint
(the next attempt starts over at step 0 beside the rollouts and weights the dead one committed,
and the run completes), and the time-limit signal arriving during SFT (the attempt records its
end and the job requeues itself)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from launch_sim_helpers import LaunchEnv
from simnode import kill_node

from opsctl.launch.ledger import load_ledger
from opsctl.watch import trainer_steps

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def wait_until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_death_before_the_first_checkpoint_restarts_at_zero(launch_env: LaunchEnv, tmp_path: Path) -> None:
    steps = 400  # a few hundredths of a second each: long enough to kill it mid-run
    run = launch_env.root / "runs" / "early"
    # No checkpoint in this run at all: checkpoint_every is past the last step.
    out = launch_env.launch(run, "-o", f"trainer.steps={steps}", "-o", "trainer.checkpoint_every=1000")
    assert out.returncode == 0, out.stderr
    log = tmp_path / "watch.jsonl"
    watch = launch_env.watch(run, "--remediate", log=log)
    try:
        wait_until(lambda: (run / "attempts" / "0.json").exists(), 120, "attempt 0 to start")
        victim = json.loads((run / "attempts" / "0.json").read_text())["nodes"][1]  # the trainer node
        wait_until(lambda: len(trainer_steps(run / "metrics.jsonl")) >= 2, 240, "trainer step 2")
        kill_node(launch_env.sim, victim)
        assert not (run / "weights" / f"step_{steps}").exists(), "the run finished before the kill"
        assert watch.wait(timeout=420) == 0, log.read_text()[-3000:]
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    led = load_ledger(run)
    assert led.final_state == "COMPLETED", [(a.attempt, a.state, a.exit_code) for a in led.attempts]
    a0, a1 = led.attempts
    assert a0.failed_nodes == [victim] and a1.resume_step == 0 and a1.state == "COMPLETED"
    assert trainer_steps(run / "metrics.jsonl")[-steps:] == list(range(steps))
    assert (run / "weights" / f"step_{steps}" / "STABLE").is_file()
    (launch_env.root / "quarantine.json").unlink()
    launch_env.sim.reset()  # the victim's slurmd back, every node resumed


def test_usr1_during_sft_ends_the_attempt_and_requeues(launch_env: LaunchEnv) -> None:
    run = launch_env.root / "runs" / "usr1-sft"
    out = launch_env.launch(run, "-o", "sft.steps=1000000", "-o", "trainer.steps=4")
    assert out.returncode == 0, out.stderr
    try:
        wait_until(lambda: (run / "attempts" / "0.json").exists(), 120, "attempt 0 to start")
        job = json.loads((run / "attempts" / "0.json").read_text())["job_id"]
        metrics = run / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and '"sft"' in metrics.read_text(), 120, "SFT to start")
        # What Slurm does at --signal=B:USR1@N: the signal goes to the batch script only.
        subprocess.run(["scancel", "--batch", "--signal=USR1", str(job)], env=launch_env.env, check=True)
        end = run / "attempts" / "0.end.json"
        wait_until(end.exists, 60, "attempt 0 to record its end")
        assert json.loads(end.read_text())["exit_code"] == 143
        assert not (run / "sft" / "final" / "STABLE").exists()
        # Requeued: the same job starts attempt 1 once Slurm's requeue hold is over.
        wait_until(lambda: (run / "attempts" / "1.json").exists(), 120, "attempt 1 to start")
        assert json.loads((run / "attempts" / "1.json").read_text())["job_id"] == job
    finally:
        launch_env.sim.reset()
