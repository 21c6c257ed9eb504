"""`opsctl runs list`: the runs under [launch] runs_dir, read from their directories alone.

A run directory is one with the resolved config.toml every launch writes first. A Slurm launch
adds ledger.json (the launcher's and `opsctl watch`'s record) and attempts/<n>[.end].json (the
batch job's own); a `--local` run has neither. Nothing here asks Slurm: the list works on any host
that mounts the runs directory, for live runs and finished ones, and a run whose files are partly
written or damaged is still listed, with what could not be read in its note.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opsctl.errors import OpsctlError, UsageError
from opsctl.launch.ledger import LEDGER, Ledger, load_ledger, read_attempts

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
REWARD_PREFIX = "reward_mean_"

# A run's state is the ledger's final state where one is recorded (the launcher's SUBMIT_FAILED;
# `opsctl watch`'s COMPLETED, GAVE_UP, UNKNOWN or the Slurm job's end state), else what the files
# alone tell: one of these.
FILE_STATES = ("PENDING", "RUNNING", "ENDED", "COMPLETED", "INCOMPLETE", "UNREADABLE")


@dataclass
class EvalPoint:
    step: int
    accuracy: float
    policy_version: int | None = None


@dataclass
class RunRow:
    run_id: str
    run_dir: str
    launcher: str  # "slurm" (a ledger) | "local"
    state: str  # the ledger's final state, else one of FILE_STATES
    steps_done: int | None = None  # trainer steps recorded in metrics.jsonl (the last step + 1)
    steps: int | None = None  # trainer.steps of the run's config
    attempts: int = 0
    rewards: dict[str, float] = field(default_factory=dict)  # env -> last mean training reward
    evals: dict[str, EvalPoint] = field(default_factory=dict)  # env -> last held-out evaluation
    started: float | None = None  # unix seconds: submission, else the config's write
    updated: float | None = None  # unix seconds: the newest of metrics.jsonl and the ledger
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_runs(runs_dir: Path) -> list[RunRow]:
    """Every run directory directly under runs_dir, newest first."""
    if not runs_dir.is_dir():
        raise UsageError(f"runs directory {runs_dir} does not exist ([launch] runs_dir, or --runs-dir)")
    rows = [summarize(d) for d in sorted(runs_dir.iterdir()) if d.is_dir() and (d / CONFIG).is_file()]
    return sorted(rows, key=lambda r: (r.started or 0.0, r.run_id), reverse=True)


def summarize(run_dir: Path) -> RunRow:
    notes: list[str] = []
    steps, env = _config(run_dir, notes)
    progress = _progress(run_dir / METRICS, env)
    row = RunRow(
        run_id=run_dir.name,
        run_dir=str(run_dir),
        launcher="slurm" if (run_dir / LEDGER).exists() else "local",
        state="INCOMPLETE",
        steps_done=progress.steps_done,
        steps=steps,
        rewards=progress.rewards,
        evals=progress.evals,
        started=_mtime(run_dir / CONFIG),
        updated=max((t for t in (_mtime(run_dir / METRICS), _mtime(run_dir / LEDGER)) if t), default=None),
    )
    if row.launcher == "slurm":
        _slurm_state(row, run_dir, notes)
    elif steps is not None and row.steps_done == steps:
        row.state = "COMPLETED"
    else:
        notes.append("a local run: no ledger says whether its processes still run")
    if progress.skipped:
        notes.append(f"{progress.skipped} unreadable line(s) in {METRICS}")
    row.note = "; ".join(notes)
    return row


def _slurm_state(row: RunRow, run_dir: Path, notes: list[str]) -> None:
    try:
        ledger = load_ledger(run_dir)
    except OpsctlError as exc:
        row.state = "UNREADABLE"
        notes.append(str(exc))
        return
    attempts = _attempts(ledger, run_dir)
    row.attempts = len(attempts)
    row.started = ledger.submitted_at or row.started
    if ledger.final_state:
        row.state = ledger.final_state
        if ledger.failure:
            notes.append(ledger.failure)
        return
    if not attempts:
        row.state = "PENDING"
        jobs = ", ".join(str(j) for j in ledger.job_ids) or "none"
        notes.append(f"no attempt has started (Slurm job {jobs})")
        return
    last = attempts[max(attempts)]
    if last.get("end") is None:
        row.state = "RUNNING"
        notes.append(f"attempt {max(attempts)} has no end record; `opsctl watch` asks Slurm")
        return
    code = last.get("exit_code")
    if code == 0 and row.steps is not None and row.steps_done == row.steps:
        row.state = "COMPLETED"
        return
    row.state = "ENDED"
    notes.append(f"attempt {max(attempts)} exited {code}; no final state recorded (a requeue may follow)")


def _attempts(ledger: Ledger, run_dir: Path) -> dict[int, dict[str, Any]]:
    """attempt -> record: the batch job's own records over what the ledger has of them."""
    merged: dict[int, dict[str, Any]] = {a.attempt: asdict(a) for a in ledger.attempts}
    try:
        own = read_attempts(run_dir)
    except OpsctlError:
        own = {}
    for n, rec in own.items():
        merged.setdefault(n, {}).update({k: v for k, v in rec.items() if v is not None})
    return merged


@dataclass
class _Progress:
    steps_done: int | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    evals: dict[str, EvalPoint] = field(default_factory=dict)
    skipped: int = 0


def _progress(path: Path, env: str) -> _Progress:
    import json

    out = _Progress()
    try:
        fh = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return out
    with fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                out.skipped += line.strip() != ""
                continue
            if isinstance(rec, dict):
                _record(out, rec, env)
    return out


def _record(out: _Progress, rec: dict[str, Any], env: str) -> None:
    step = rec.get("step")
    if not isinstance(step, int):
        return
    if rec.get("event") == "eval" and isinstance(rec.get("eval_accuracy"), int | float):
        version = rec.get("policy_version")
        out.evals[str(rec.get("env") or env)] = EvalPoint(
            step, float(rec["eval_accuracy"]), version if isinstance(version, int) else None
        )
    elif rec.get("component") == "trainer":
        out.steps_done = step + 1  # trainer steps count from 0
    elif rec.get("component") == "orchestrator":
        for key, value in rec.items():
            if key.startswith(REWARD_PREFIX) and isinstance(value, int | float):
                out.rewards[key[len(REWARD_PREFIX):]] = float(value)


def _config(run_dir: Path, notes: list[str]) -> tuple[int | None, str]:
    """trainer.steps and env.name of the run's resolved configuration."""
    try:
        with (run_dir / CONFIG).open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        notes.append(f"{CONFIG} unreadable: {exc}")
        return None, ""
    steps = data.get("trainer", {}).get("steps")
    env = data.get("env", {}).get("name", "")
    return (steps if isinstance(steps, int) else None), str(env)


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
