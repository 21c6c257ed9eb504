"""A run launched on every node of the partition loses a trainer node: with no spare left,
`opsctl watch --remediate` resubmits it on the three nodes that remain, the next attempt's trainer
runs two ranks instead of three (trainer.world_size follows the allocation), resumes from the
three-rank checkpoint and completes, on the real Slurm of the simulated cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_sim_helpers import LaunchEnv
from simnode import kill_node
from test_launch_on_sim import finish, wait_for

from opsctl.launch.ledger import load_ledger
from opsctl.watch import trainer_steps
from training.config import load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STEPS, EVERY = 30, 5


def test_no_spare_node_left_resumes_on_fewer_trainer_ranks(launch_env: LaunchEnv, tmp_path: Path) -> None:
    run = launch_env.root / "runs" / "shrink"
    out = launch_env.launch(run, "--nodes", "4", "-o", f"trainer.steps={STEPS}",
                            "-o", f"trainer.checkpoint_every={EVERY}")
    assert out.returncode == 0, out.stderr
    assert load_config(run / "config.toml").trainer.world_size == 3
    log = tmp_path / "watch.jsonl"
    watch = launch_env.watch(run, "--remediate", log=log)
    victim = ""
    try:
        wait_for(lambda: (run / "attempts" / "0.json").exists(), 120, "attempt 0 to start")
        first = json.loads((run / "attempts" / "0.json").read_text())
        assert len(first["nodes"]) == 4 and first["trainer_world_size"] == 3
        node = first["nodes"][2]  # a trainer node, neither the batch host nor rank 0's
        wait_for(lambda: any(s >= EVERY + 2 for s in trainer_steps(run / "metrics.jsonl")), 300,
                 f"step {EVERY + 2}")
        kill_node(launch_env.sim, node)
        victim = node  # its slurmd is down from here on: restore() starts it again
        assert finish(watch, 480) == 0, log.read_text()[-3000:]
    finally:
        launch_env.restore(watch, victim)
    led = load_ledger(run)
    assert led.final_state == "COMPLETED", led
    a0, a1 = led.attempts
    assert a0.failed_nodes == [victim] and a0.trainer_world_size == 3
    assert len(a1.nodes) == 3 and victim not in a1.nodes and a1.trainer_world_size == 2
    assert (a1.state, a1.exit_code) == ("COMPLETED", 0) and a1.resume_step % EVERY == 0 < a1.resume_step
    requeued = [r.detail for r in led.remediations if r.action == "requeued"]
    assert len(requeued) == 1 and "shrunk to 3 nodes, 2 of them trainer (launched with 3)" in requeued[0]
    assert load_config(run / "config.toml").trainer.world_size == 2
    # Every step trained, none before the resume point twice; the second attempt ran two ranks.
    seen = trainer_steps(run / "metrics.jsonl")
    assert sorted(set(seen)) == list(range(STEPS))
    assert all(seen.count(s) == 1 for s in range(a1.resume_step))
    logs = sorted(p.name for p in (run / "logs" / "attempt-1").glob("trainer-*.log"))
    assert logs == ["trainer-0.log", "trainer-1.log"]
