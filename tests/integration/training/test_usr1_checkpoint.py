"""SIGUSR1 (what Slurm sends before a time limit) makes the trainer checkpoint at the next step and
stop, the orchestrator checkpoints the same step from its snapshots, and the next attempt resumes
there rather than at the last periodic checkpoint, with no task trained on twice."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from rljob_helpers import FAST, launch_argv, metrics

pytestmark = pytest.mark.integration

STEPS = 30


def test_usr1_checkpoints_trainer_and_orchestrator_at_the_same_step(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    overrides = [
        *FAST,
        f"trainer.steps={STEPS}",
        "trainer.checkpoint_every=1000",
        "orchestrator.async_level=1",
    ]
    job = jobs(launch_argv(out, overrides), tmp_path / "first.log")
    deadline = time.monotonic() + 600
    while not any(r["component"] == "trainer" and r["step"] >= 5 for r in _metrics(out)):
        assert job.proc.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()
        time.sleep(0.05)
    pid = json.loads((out / "peers" / "metrics-trainer.json").read_text())["pid"]
    os.kill(pid, signal.SIGUSR1)
    ckpts = out / "checkpoints"
    while not (
        list(ckpts.glob("orchestrator/step_*/COMMITTED")) and list(ckpts.glob("trainer/step_*/COMMITTED"))
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.kill()
    (step_dir,) = [p.parent for p in ckpts.glob("trainer/step_*/COMMITTED")]
    step = int(step_dir.name[5:])
    assert 5 < step < STEPS
    assert (ckpts / "orchestrator" / f"step_{step}" / "COMMITTED").is_file()

    assert jobs(launch_argv(out, [], resume=True), tmp_path / "resume.log").wait(600) == 0
    trainer_steps = [r["step"] for r in metrics(out) if r["component"] == "trainer"]
    # The second attempt starts exactly at the SIGUSR1 checkpoint.
    first_resumed = trainer_steps.index(step)
    assert trainer_steps[first_resumed:] == list(range(step, STEPS))
    groups = [
        g
        for s in range(STEPS)
        for g in json.loads((out / "rollouts" / f"step_{s}" / "STABLE").read_text())["groups"]
    ]
    assert len(groups) == len(set(groups)) == STEPS * 4


def _metrics(out: Path) -> list[dict]:  # type: ignore[type-arg]
    return metrics(out) if (out / "metrics.jsonl").exists() else []
