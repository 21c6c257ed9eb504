from pathlib import Path

import pytest

from opsctl.launch import attempt
from opsctl.launch.local import write_config
from training.config import JobConfig
from training.fsutil import COMMITTED, STABLE, publish_dir, step_dirs
from training.rundir import RunDir, resume_point


def commit(parent: Path, step: int, marker: str) -> None:
    publish_dir(parent / f"step_{step}", lambda d: None, marker)


def test_resume_point_is_the_newest_step_both_sides_committed(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for s in (5, 10, 11, 12):
        commit(run.weights, s, STABLE)
    for s in range(13):
        commit(run.rollouts, s, STABLE)
    commit(run.ckpt("trainer"), 5, COMMITTED)
    commit(run.ckpt("trainer"), 10, COMMITTED)
    commit(run.ckpt("orchestrator"), 5, COMMITTED)
    commit(run.ckpt("orchestrator"), 10, COMMITTED)
    (run.ckpt("orchestrator") / "step_15").mkdir()  # killed while writing: no marker
    (run.rollouts / "step_13").mkdir()

    assert resume_point(run) == 10
    # Everything past the resume point is gone; the policy it starts from stays.
    assert sorted(step_dirs(run.weights)) == [5, 10]
    assert sorted(step_dirs(run.rollouts)) == list(range(10))
    assert not (run.ckpt("orchestrator") / "step_15").exists()
    assert not (run.rollouts / "step_13").exists()


def test_resume_without_checkpoints_starts_over(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    commit(run.weights, 1, STABLE)
    commit(run.rollouts, 0, STABLE)
    assert resume_point(run) == 0
    assert step_dirs(run.rollouts) == {} and step_dirs(run.weights) == {}


def killed_before_first_checkpoint(run: RunDir) -> None:
    """What an attempt killed at trainer step 2 leaves: the orchestrator async_level (2) steps
    ahead, weights 1-2 published, no checkpoint directory yet, and half-written leftovers."""
    write_config(run, JobConfig())
    for s in range(5):
        commit(run.rollouts, s, STABLE)
    commit(run.weights, 1, STABLE)
    commit(run.weights, 2, STABLE)
    (run.rollouts / ".tmp-step_5-0123abcd").mkdir()  # killed mid-publish
    (run.weights / "step_3").mkdir()  # renamed into place, marker not yet written
    (run.root / "sft" / ".tmp-final-0123abcd").mkdir(parents=True)  # a killed SFT's temp dir


def test_attempt_killed_before_its_first_checkpoint_restarts_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir(tmp_path)
    killed_before_first_checkpoint(run)
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[001-002]")
    assert not run.ckpt("trainer").exists()

    assert attempt.start(tmp_path) == (0, 0)
    # Nothing of the dead attempt stays that the new one would collide with or trust.
    assert step_dirs(run.rollouts) == {} and step_dirs(run.weights) == {}
    assert sorted(p.name for p in run.rollouts.iterdir()) == []
    assert sorted(p.name for p in run.weights.iterdir()) == []
    assert list((run.root / "sft").iterdir()) == []
    # The new attempt can publish step 0 and version 1 again.
    commit(run.rollouts, 0, STABLE)
    commit(run.weights, 1, STABLE)


def test_attempt_start_resumes_at_the_common_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDir(tmp_path)
    write_config(run, JobConfig())
    for s in range(8):
        commit(run.rollouts, s, STABLE)
    for s in (4, 5, 6):
        commit(run.weights, s, STABLE)
    commit(run.ckpt("trainer"), 4, COMMITTED)
    commit(run.ckpt("orchestrator"), 4, COMMITTED)
    commit(run.ckpt("orchestrator"), 6, COMMITTED)  # the trainer never got there
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)

    assert attempt.start(tmp_path) == (0, 4)
    assert sorted(step_dirs(run.rollouts)) == [0, 1, 2, 3]
    assert sorted(step_dirs(run.weights)) == [4]
    assert sorted(step_dirs(run.ckpt("orchestrator"), COMMITTED)) == [4]
    # The ledger records where the attempt resumed.
    assert attempt.start(tmp_path) == (1, 4)


def test_discard_leftovers_of_a_killed_cleanup_are_removed(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    commit(run.weights, 3, STABLE)
    half = run.root / ".discarded" / "weights-step_9-0123abcd"
    half.mkdir(parents=True)
    (half / STABLE).write_text("{}")  # a marker whose files were already deleted
    assert resume_point(run) == 0
    assert not (run.root / ".discarded").exists()
    assert step_dirs(run.weights) == {}
