"""Quarantine, run ledger, attempt records and HCA discovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.errors import ConfigError, UsageError
from opsctl.launch.attempt import compute_hcas, read_sysfs
from opsctl.launch.ledger import (
    Attempt,
    Ledger,
    Remediation,
    find_run,
    load_ledger,
    read_attempts,
    record_attempt_end,
    record_attempt_start,
)
from opsctl.launch.quarantine import Quarantine


def test_quarantine_persists_and_merges_writers(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    a, b = Quarantine.load(path), Quarantine.load(path)
    assert a.add("gpu-002", "slurm not_responding", "run1", 7)
    assert b.add("gpu-005", "health FAIL gpu-xid", "run2", 9)  # b never saw a's entry
    assert not a.add("gpu-002", "again")
    assert Quarantine.load(path).nodes == {"gpu-002", "gpu-005"}
    assert Quarantine.load(path).entries["gpu-002"].run_id == "run1"
    assert a.release("gpu-005") and not a.release("gpu-005")
    assert Quarantine.load(path).nodes == {"gpu-002"}


def test_unreadable_quarantine_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "q.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"quarantine file"):
        Quarantine.load(tmp_path / "q.json")


def test_ledger_round_trip_and_lookup(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    led = Ledger("r1", str(run), job_ids=[5], nodes_requested=2, inference_nodes=1,
                 attempts=[Attempt(0, 5, ["gpu-001", "gpu-002"])],
                 remediations=[Remediation(1.0, "gpu-002", "slurm down", "quarantined")])
    led.save()
    again = load_ledger(run)
    assert again == led
    assert find_run("r1", str(tmp_path / "runs")) == run.resolve()
    assert find_run(str(run), "/nonexistent") == run.resolve()
    with pytest.raises(UsageError, match=r"unknown run 'r2'"):
        find_run("r2", str(tmp_path / "runs"))
    with pytest.raises(UsageError, match=r"no run ledger"):
        load_ledger(tmp_path)


def test_attempt_end_record_wins_over_start_record(tmp_path: Path) -> None:
    record_attempt_start(tmp_path, Attempt(0, 5, ["gpu-001"], resume_step=0, start=10.0))
    record_attempt_end(tmp_path, 0, 0)
    record_attempt_start(tmp_path, Attempt(1, 5, ["gpu-003"], resume_step=15, start=20.0))
    recs = read_attempts(tmp_path)
    assert recs[0]["exit_code"] == 0 and recs[0]["end"] is not None
    assert recs[1]["exit_code"] is None and recs[1]["resume_step"] == 15


def _port(root: Path, dev: str, port: int, state: str, layer: str) -> None:
    p = root / dev / "ports" / str(port)
    p.mkdir(parents=True)
    (p / "state").write_text(state + "\n")
    (p / "link_layer").write_text(layer + "\n")


def test_hcas_are_active_infiniband_ports_only(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, "4: ACTIVE", "InfiniBand")
    _port(tmp_path, "mlx5_1", 1, "1: DOWN", "InfiniBand")
    _port(tmp_path, "mlx5_10", 1, "4: ACTIVE", "InfiniBand")
    _port(tmp_path, "mlx5_2", 1, "4: ACTIVE", "InfiniBand")
    _port(tmp_path, "mlx5_bond_0", 1, "4: ACTIVE", "Ethernet")  # storage / RoCE
    assert compute_hcas(read_sysfs(tmp_path)) == ["mlx5_0:1", "mlx5_2:1", "mlx5_10:1"]
    assert compute_hcas(read_sysfs(tmp_path / "absent")) == []


def test_attempt_cli_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from opsctl.launch.attempt import main

    assert main(["bogus"]) == 2
    assert "usage" in capsys.readouterr().err


def test_attempts_are_numbered_across_jobs(tmp_path: Path) -> None:
    from opsctl.launch.attempt import next_attempt

    assert next_attempt(tmp_path) == 0
    record_attempt_start(tmp_path, Attempt(0, 5))
    record_attempt_start(tmp_path, Attempt(1, 9))  # a resubmitted job: its own restart count is 0
    assert next_attempt(tmp_path) == 2
