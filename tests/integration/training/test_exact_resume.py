"""Kill a whole job (SIGKILL to every process) after a checkpoint and resume it: with
async_level=0 and a fixed seed the final weights equal an uninterrupted run's, bit for bit, and
every task is trained on exactly as often as in the uninterrupted run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from rljob_helpers import FAST, launch_argv, metrics

from training.weights import load_trainer_state

pytestmark = pytest.mark.integration

STEPS, EVERY, KILL_AFTER = 24, 6, 12
OVERRIDES = [
    *FAST,
    f"trainer.steps={STEPS}",
    f"trainer.checkpoint_every={EVERY}",
    "orchestrator.async_level=0",
    "orchestrator.max_off_policy_steps=0",
    "seed=5",
    "orchestrator.batch_groups=8",
]


def batches(run: Path) -> list[list[str]]:
    return [
        json.loads((run / "rollouts" / f"step_{s}" / "STABLE").read_text())["groups"] for s in range(STEPS)
    ]


def test_killed_and_resumed_run_matches_uninterrupted(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    assert jobs(launch_argv(ref, OVERRIDES), tmp_path / "ref.log").wait(600) == 0

    job = jobs(launch_argv(cut, OVERRIDES), tmp_path / "cut.log")
    marker = cut / "checkpoints" / "orchestrator" / f"step_{KILL_AFTER}" / "COMMITTED"
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert job.proc.poll() is None, (tmp_path / "cut.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    job.kill()  # SIGKILL to the launcher and every process it started
    assert not (cut / "weights" / f"step_{STEPS}").exists(), "the run finished before it was killed"

    assert jobs(launch_argv(cut, [], resume=True), tmp_path / "resume.log").wait(600) == 0, (
        tmp_path / "resume.log"
    ).read_text()
    # SFT had committed its model: the resumed launch did not start the stage again.
    sft_log = (cut / "logs" / "sft.log").read_text()
    assert sft_log.count("SFT done") == 1 and "already committed" not in sft_log, sft_log[-2000:]

    w_ref = load_trainer_state(ref / "weights" / f"step_{STEPS}")
    w_cut = load_trainer_state(cut / "weights" / f"step_{STEPS}")
    assert w_ref.keys() == w_cut.keys()
    assert all((w_ref[k] == w_cut[k]).all() for k in w_ref), "weights differ after resume"

    # No task repeated or skipped: the resumed run trained on the same groups, in the same order.
    assert batches(cut) == batches(ref)
    resumed_from = [r for r in metrics(cut) if r["component"] == "trainer"]
    assert sorted({r["step"] for r in resumed_from}) == list(range(STEPS))
