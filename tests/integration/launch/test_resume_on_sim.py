"""Attempts that end early still lead to a completed run, on the real Slurm of the simulated
cluster.

- The trainer node dies after rollouts and weights of step >= 1 were committed (the orchestrator
  async_level steps ahead) but before the first checkpoint: `opsctl watch --remediate` requeues the
  run without that node, and the next attempt starts over at step 0 without tripping over what the
  dead one committed.
- Slurm's pre-timeout SIGUSR1 (`--signal=B:USR1@...`, sent here with `scancel --batch`) arrives
  during SFT: the batch script's trap stops SFT, requeues the job, and the next attempt redoes SFT.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from launch_sim_helpers import LaunchEnv
from simnode import kill_node
from test_launch_on_sim import finish, wait_for

from opsctl.launch.ledger import load_ledger
from opsctl.watch import trainer_steps
from training.fsutil import COMMITTED, STABLE, step_dirs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS = 120
# Far enough that the kill lands before it even when steps take a fifth of a second (a 14-step
# run with a checkpoint at 10 once finished before the kill), and reached by the second attempt.
CHECKPOINT_EVERY = 100


def test_killed_before_first_checkpoint_restarts_and_completes(launch_env: LaunchEnv, tmp_path: Path) -> None:
    run = launch_env.root / "runs" / "early-death"
    out = launch_env.launch(run, "-o", f"trainer.steps={STEPS}", "-o", "orchestrator.async_level=2",
                            "-o", f"trainer.checkpoint_every={CHECKPOINT_EVERY}",
                            # more tasks than the run draws, so a task seen twice means reuse
                            "-o", "env.kwargs={digits = 2, num_train = 1000, num_eval = 20}")
    assert out.returncode == 0, out.stderr
    log = tmp_path / "watch.jsonl"
    watch = launch_env.watch(run, "--remediate", log=log)
    victim = ""

    def committed(kind: str, least: int) -> bool:
        # Any step from `least` on: older weights are pruned (keep_weights) within a second or two,
        # so waiting for one particular step can miss it on a fast machine.
        return any(s >= least for s in step_dirs(run / kind, STABLE))

    try:
        wait_for(lambda: (run / "attempts" / "0.json").exists(), 120, "attempt 0 to start")
        node = json.loads((run / "attempts" / "0.json").read_text())["nodes"][1]  # the trainer node
        wait_for(lambda: committed("weights", 1) and committed("rollouts", 2), 420,
                 "weights 1 and rollouts 2")
        kill_node(launch_env.sim, node)
        victim = node  # its slurmd is down from here on: the finally below starts it again
        left_rollouts = sorted(step_dirs(run / "rollouts"))
        left_weights = sorted(step_dirs(run / "weights"))
        # The premise: the dead attempt committed work past step 0 and no checkpoint.
        assert left_rollouts[-1] >= 2 and left_weights[-1] >= 1
        assert step_dirs(run / "checkpoints" / "trainer", COMMITTED) == {}
        assert finish(watch, 420) == 0, log.read_text()[-3000:]
    finally:
        launch_env.restore(watch, victim)
    led = load_ledger(run)
    assert led.final_state == "COMPLETED", led
    a0, a1 = led.attempts
    assert a0.failed_nodes == [victim] and victim not in a1.nodes
    assert (a1.resume_step, a1.state, a1.exit_code) == (0, "COMPLETED", 0)
    # The second attempt trained every step once, from 0, and checkpointed on its way.
    seen = trainer_steps(run / "metrics.jsonl")
    assert seen[-STEPS:] == list(range(STEPS)) and len(seen) < 2 * STEPS
    assert led.checkpoints == [CHECKPOINT_EVERY]
    # SFT had committed its model: the second attempt did not start the stage again.
    assert "SFT done" in (run / "logs" / "attempt-0" / "sft.log").read_text()
    assert not (run / "logs" / "attempt-1" / "sft.log").exists()
    # One batch per step, none holding a task twice: the dead attempt's rollouts were not reused.
    groups = [g for s in range(STEPS)
              for g in json.loads((run / "rollouts" / f"step_{s}" / STABLE).read_text())["groups"]]
    assert len(groups) == len(set(groups)) == STEPS * 4
    assert not (run / ".discarded").exists()
    failures = subprocess.run(["grep", "-rl", "FileExistsError", str(run / "logs")], capture_output=True,
                              text=True, check=False).stdout
    assert failures == ""


def test_usr1_during_sft_requeues_and_the_run_completes(launch_env: LaunchEnv, tmp_path: Path) -> None:
    run = launch_env.root / "runs" / "usr1-sft"
    out = launch_env.launch(run, "-o", "trainer.steps=4", "-o", "sft.steps=150")
    assert out.returncode == 0, out.stderr
    log = tmp_path / "watch.jsonl"
    watch = launch_env.watch(run, log=log)
    try:
        wait_for(lambda: (run / "attempts" / "0.json").exists(), 120, "attempt 0 to start")
        job_id = json.loads((run / "attempts" / "0.json").read_text())["job_id"]
        wait_for(lambda: (run / "metrics.jsonl").exists()
                 and '"stage": "sft"' in (run / "metrics.jsonl").read_text(), 120, "SFT to train")
        # What Slurm does signal_before_s ahead of the time limit: USR1 to the batch shell alone.
        sent = subprocess.run(["scancel", "--batch", "--signal=USR1", str(job_id)], capture_output=True,
                              text=True, env=launch_env.env, check=False)
        assert sent.returncode == 0, sent.stderr
        assert finish(watch, 420) == 0, log.read_text()[-3000:]
    finally:
        if watch.poll() is None:
            watch.kill()
    led = load_ledger(run)
    assert led.final_state == "COMPLETED" and led.job_ids == [job_id]
    a0, a1 = led.attempts
    assert (a0.job_id, a0.exit_code) == (job_id, 143)
    assert (a1.job_id, a1.resume_step, a1.state, a1.exit_code) == (job_id, 0, "COMPLETED", 0)
    # The first attempt was stopped in SFT, before publishing; the second ran SFT whole, then RL.
    assert "SIGUSR1: stopped before SFT step" in (run / "logs" / "attempt-0" / "sft.log").read_text()
    assert not (run / "logs" / "attempt-0" / "trainer-0.log").exists()
    assert "SFT done" in (run / "logs" / "attempt-1" / "sft.log").read_text()
    assert trainer_steps(run / "metrics.jsonl") == list(range(4))
