from pathlib import Path

from opsctl.launch.local import resume_point
from training.config import JobConfig
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
