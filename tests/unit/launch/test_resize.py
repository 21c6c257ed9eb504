"""Resubmitting on fewer nodes: the size decision, and an attempt's start matching the run's
trainer.world_size to the nodes Slurm gave the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.launch.attempt import main as attempt_main
from opsctl.launch.ledger import read_attempts
from opsctl.launch.resize import resubmit_size
from opsctl.launch.settings import LaunchSection
from training.config import dump_toml, load_config


def test_enough_nodes_left_keeps_the_launch_size() -> None:
    for usable in (64, 70):
        size = resubmit_size(64, 16, usable, shrink=True, min_trainer_nodes=1)
        assert (size.nodes, size.note) == (None, "")


def test_no_spare_left_shrinks_the_trainer_share_only() -> None:
    size = resubmit_size(64, 16, 63, shrink=True, min_trainer_nodes=1)
    assert size.nodes == 63
    assert "47 of them trainer (launched with 48)" in size.note


def test_below_the_trainer_minimum_or_shrinking_off_the_job_waits_at_its_size() -> None:
    low = resubmit_size(64, 16, 40, shrink=True, min_trainer_nodes=32)
    assert low.nodes is None and "min_trainer_nodes" in low.note and "40 usable" in low.note
    none_left = resubmit_size(3, 1, 1, shrink=True, min_trainer_nodes=1)
    assert none_left.nodes is None  # no node would be left for the trainer
    off = resubmit_size(64, 16, 63, shrink=False, min_trainer_nodes=1)
    assert off.nodes is None and "shrink_on_failure = false" in off.note


def test_min_trainer_nodes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="min_trainer_nodes"):
        LaunchSection(min_trainer_nodes=0).validate()


def write_run(root: Path, world: int) -> Path:
    cfg = load_config(None, ["sft.enabled=false", f"trainer.world_size={world}"])
    root.mkdir()
    (root / "config.toml").write_text(dump_toml(cfg))
    return root


def test_attempt_start_sets_the_trainer_world_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run", world=3)
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[001-003]")
    assert attempt_main(["start", str(run), "2"]) == 0
    assert capsys.readouterr().out.split() == ["0", "0"]
    assert load_config(run / "config.toml").trainer.world_size == 2
    rec = read_attempts(run)[0]
    assert (rec["trainer_world_size"], rec["job_id"]) == (2, 41)
    assert rec["nodes"] == ["gpu-001", "gpu-002", "gpu-003"]
    # Without the argument (an older script) the config stays as it is and is recorded.
    assert attempt_main(["start", str(run)]) == 0
    assert read_attempts(run)[1]["trainer_world_size"] == 2


def test_attempt_start_refuses_a_job_with_no_trainer_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run", world=2)
    before = (run / "config.toml").read_text()
    assert attempt_main(["start", str(run), "0"]) == 2
    assert "no node past its inference nodes" in capsys.readouterr().err
    assert attempt_main(["start", str(run), "two"]) == 2
    assert "not a number" in capsys.readouterr().err
    assert (run / "config.toml").read_text() == before and read_attempts(run) == {}
