"""`opsctl runs list` on run directories as launches leave them: finished, running, pending, ended
without a recorded final state, local, and damaged (a truncated metrics line, an unreadable ledger)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsctl.launch.ledger import Attempt, Ledger
from opsctl.launch.runs import FILE_STATES, list_runs


def make_run(root: Path, name: str, *, steps: int = 4, trained: int = 4, ledger: Ledger | None = None,
             attempts: dict[str, dict[str, Any]] | None = None, evals: tuple[int, ...] = (0, 4),
             started: float = 1.0) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(f'[env]\nname = "arithmetic"\n\n[trainer]\nsteps = {steps}\n')
    os.utime(run / "config.toml", (started, started))
    lines = []
    for step in range(trained):
        lines.append({"component": "orchestrator", "step": step, "reward_mean_arithmetic": 0.1 * step,
                      "off_policy_lag_max": 1})
        lines.append({"component": "trainer", "step": step, "loss": 0.5})
    lines += [{"event": "eval", "step": s, "policy_version": s, "eval_accuracy": 0.2 + 0.1 * s,
               "env": "arithmetic"} for s in evals]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if ledger is not None:
        ledger.run_dir = str(run)
        ledger.save()
    for file, data in (attempts or {}).items():
        (run / "attempts").mkdir(exist_ok=True)
        (run / "attempts" / file).write_text(json.dumps(data))
    return run


def slurm(**kw: Any) -> Ledger:
    return Ledger(run_id="r", run_dir="", job_ids=[7], submitted_at=kw.pop("submitted_at", 0.0), **kw)


def by_id(root: Path) -> dict[str, Any]:
    return {r.run_id: r for r in list_runs(root)}


def test_states_from_the_files_alone(tmp_path: Path) -> None:
    make_run(tmp_path, "done", ledger=slurm(final_state="COMPLETED",
                                            attempts=[Attempt(0, 7, state="COMPLETED", exit_code=0)]))
    make_run(tmp_path, "pending", trained=0, evals=(), ledger=slurm())
    make_run(tmp_path, "running", trained=2, evals=(0,), ledger=slurm(),
             attempts={"0.json": {"attempt": 0, "job_id": 7, "end": None}})
    # no watch ran: the batch job's end record (exit 0, every step trained) says it completed
    make_run(tmp_path, "unwatched", ledger=slurm(),
             attempts={"0.json": {"attempt": 0, "job_id": 7}, "0.end.json": {"attempt": 0, "end": 5.0,
                                                                              "exit_code": 0}})
    make_run(tmp_path, "ended", trained=3, ledger=slurm(),
             attempts={"0.json": {"attempt": 0, "job_id": 7}, "0.end.json": {"attempt": 0, "end": 5.0,
                                                                              "exit_code": 1}})
    make_run(tmp_path, "local-done")
    make_run(tmp_path, "local-partial", trained=2)
    rows = by_id(tmp_path)
    got = {name: (r.launcher, r.state, r.steps_done, r.steps, r.attempts) for name, r in rows.items()}
    assert got == {
        "done": ("slurm", "COMPLETED", 4, 4, 1),
        "pending": ("slurm", "PENDING", None, 4, 0),
        "running": ("slurm", "RUNNING", 2, 4, 1),
        "unwatched": ("slurm", "COMPLETED", 4, 4, 1),
        "ended": ("slurm", "ENDED", 3, 4, 1),
        "local-done": ("local", "COMPLETED", 4, 4, 0),
        "local-partial": ("local", "INCOMPLETE", 2, 4, 0),
    }
    assert {r.state for r in rows.values()} <= set(FILE_STATES)
    assert "exited 1" in rows["ended"].note and "job 7" in rows["pending"].note
    done = rows["done"]
    assert done.rewards == {"arithmetic": pytest.approx(0.3)}
    assert (done.evals["arithmetic"].step, done.evals["arithmetic"].accuracy) == (4, pytest.approx(0.6))


def test_newest_first_and_only_run_directories(tmp_path: Path) -> None:
    make_run(tmp_path, "old", started=100.0)
    make_run(tmp_path, "new", started=200.0)
    make_run(tmp_path, "submitted", ledger=slurm(submitted_at=150.0, final_state="FAILED",
                                                 failure="srun could not create a job step: x"))
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    rows = list_runs(tmp_path)
    assert [r.run_id for r in rows] == ["new", "submitted", "old"]
    assert rows[1].note == "srun could not create a job step: x"  # the cause `opsctl watch` found


def test_damaged_runs_are_listed_with_what_could_not_be_read(tmp_path: Path) -> None:
    truncated = make_run(tmp_path, "truncated", trained=3)
    with (truncated / "metrics.jsonl").open("a") as fh:
        fh.write('{"component": "trainer", "ste')  # a line still being written, or cut by a crash
    broken = make_run(tmp_path, "broken-ledger", ledger=slurm())
    (broken / "ledger.json").write_text("{not json")
    no_metrics = make_run(tmp_path, "no-metrics", trained=0, evals=())
    (no_metrics / "metrics.jsonl").unlink()
    bad_config = make_run(tmp_path, "bad-config")
    (bad_config / "config.toml").write_text("[trainer\n")
    rows = by_id(tmp_path)
    assert (rows["truncated"].steps_done, rows["truncated"].state) == (3, "INCOMPLETE")
    assert "1 unreadable line(s) in metrics.jsonl" in rows["truncated"].note
    assert rows["broken-ledger"].state == "UNREADABLE" and "unreadable" in rows["broken-ledger"].note
    empty = rows["no-metrics"]
    assert (empty.steps_done, empty.rewards, empty.evals) == (None, {}, {})
    assert rows["bad-config"].steps is None and "config.toml unreadable" in rows["bad-config"].note


def opsctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPSCTL_CONFIG": str(cwd / "opsctl.toml"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "opsctl", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_cli_table_json_and_errors(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    make_run(runs, "done", ledger=slurm(final_state="COMPLETED"))
    (tmp_path / "opsctl.toml").write_text('[launch]\nruns_dir = "runs"\n')  # relative to the config file
    table = opsctl("runs", "list", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "done" in table.stdout and "COMPLETED" in table.stdout and "arithmetic 0.600@4" in table.stdout
    as_json = json.loads(opsctl("runs", "list", "--json", cwd=tmp_path).stdout)
    assert as_json["runs_dir"] == str(runs) and [r["run_id"] for r in as_json["runs"]] == ["done"]
    empty = opsctl("runs", "list", "--runs-dir", str(tmp_path / "opsctl-empty"), cwd=tmp_path)
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "does not exist" in empty.stderr
    (tmp_path / "none").mkdir()
    nothing = opsctl("runs", "list", "--runs-dir", str(tmp_path / "none"), cwd=tmp_path)
    assert (nothing.returncode, nothing.stdout.strip()) == (0, f"no runs in {tmp_path / 'none'}")
