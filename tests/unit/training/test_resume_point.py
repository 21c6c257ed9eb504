from pathlib import Path

import pytest

from opsctl.launch import attempt
from opsctl.launch.local import resume_point
from training.config import JobConfig, dump_toml
from training.fsutil import COMMITTED, STABLE, publish_dir, step_dirs
from training.rundir import RunDir


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

    assert resume_point(run, JobConfig()) == 10
    # Everything past the resume point is gone; the policy it starts from stays.
    assert sorted(step_dirs(run.weights)) == [5, 10]
    assert sorted(step_dirs(run.rollouts)) == list(range(10))
    assert not (run.ckpt("orchestrator") / "step_15").exists()
    assert not (run.rollouts / "step_13").exists()


def test_resume_without_checkpoints_starts_over(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    commit(run.weights, 1, STABLE)
    commit(run.rollouts, 0, STABLE)
    assert resume_point(run, JobConfig()) == 0
    assert step_dirs(run.rollouts) == {} and step_dirs(run.weights) == {}


def test_an_attempt_killed_before_its_first_checkpoint_restarts_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dead attempt committed rollouts and weights but no checkpoint (not even the folder).
    run = RunDir(tmp_path)
    run.config.write_text(dump_toml(JobConfig()))
    for s in range(3):
        commit(run.rollouts, s, STABLE)
        commit(run.weights, s + 1, STABLE)
    (run.weights / ".tmp-step_4-0badc0de").mkdir()
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts" / "0.json").write_text('{"attempt": 0, "job_id": 40}')

    assert attempt.start(tmp_path) == (1, 0)
    # The next attempt starts at step 0 with nothing of the dead one in its way: its first
    # rollouts and weights publish instead of failing on FileExistsError.
    assert step_dirs(run.rollouts) == {} and step_dirs(run.weights) == {}
    assert not (run.weights / ".tmp-step_4-0badc0de").exists()
    publish_dir(run.rollouts / "step_0", lambda d: None, STABLE)
    publish_dir(run.weights / "step_1", lambda d: None, STABLE)
