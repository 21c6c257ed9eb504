"""The run ledger: what was launched, where, how often, and how it ended.

RUN_DIR/ledger.json is written by the launcher and by `opsctl watch`; each attempt of the batch
job writes its own RUN_DIR/attempts/<n>.json (start, nodes, resume step) and
attempts/<n>.end.json, so no file has two writers.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opsctl.errors import UsageError
from opsctl.launch.fileio import read_json, write_json

LEDGER = "ledger.json"


@dataclass
class Attempt:
    attempt: int
    job_id: int
    nodes: list[str] = field(default_factory=list)
    resume_step: int = 0
    start: float = 0.0
    end: float | None = None
    state: str = "RUNNING"  # the job state when the attempt ended, or RUNNING
    exit_code: int | None = None
    failed_nodes: list[str] = field(default_factory=list)
    trainer_world_size: int = 0  # trainer ranks of this attempt (0: not recorded)


@dataclass
class Remediation:
    time: float
    node: str
    why: str
    action: str  # drained | quarantined | requeued | refused | gave-up
    detail: str = ""


@dataclass
class Ledger:
    run_id: str
    run_dir: str
    job_ids: list[int] = field(default_factory=list)
    nodes_requested: int = 0
    inference_nodes: int = 0
    excluded: dict[str, str] = field(default_factory=dict)  # node -> why, at launch and after
    attempts: list[Attempt] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)  # committed trainer checkpoint steps
    remediations: list[Remediation] = field(default_factory=list)
    submitted_at: float = 0.0
    final_state: str = ""  # COMPLETED | FAILED | GAVE_UP | CANCELLED | "" while running
    last_step: int | None = None
    failure: str = ""  # why the job failed where its own log says so (opsctl.launch.joblog)
    # held-out evaluations by environment: {step, accuracy, policy_version}, in step order
    evals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        d = dict(data)
        d["attempts"] = [Attempt(**a) for a in d.get("attempts", [])]
        d["remediations"] = [Remediation(**r) for r in d.get("remediations", [])]
        return cls(**d)

    def save(self) -> None:
        write_json(Path(self.run_dir) / LEDGER, self.to_dict())

    def attempt(self, n: int) -> Attempt | None:
        return next((a for a in self.attempts if a.attempt == n), None)


def load_ledger(run_dir: Path) -> Ledger:
    try:
        return Ledger.from_dict(read_json(run_dir / LEDGER, "run ledger"))
    except FileNotFoundError:
        raise UsageError(f"no run ledger in {run_dir} (not a run launched on Slurm?)") from None


def find_run(run: str, runs_dir: str) -> Path:
    """RUN is a run directory or a run id under [launch] runs_dir."""
    candidates = [Path(run), Path(runs_dir) / run]
    for c in candidates:
        if (c / LEDGER).exists():
            return c.resolve()
    raise UsageError(f"unknown run {run!r}: no {LEDGER} in {' or '.join(str(c) for c in candidates)}")


def record_attempt_start(run_dir: Path, attempt: Attempt) -> None:
    write_json(run_dir / "attempts" / f"{attempt.attempt}.json", asdict(attempt))


def record_attempt_end(run_dir: Path, attempt: int, exit_code: int) -> None:
    write_json(run_dir / "attempts" / f"{attempt}.end.json",
               {"attempt": attempt, "end": round(time.time(), 3), "exit_code": exit_code})


def read_attempts(run_dir: Path) -> dict[int, dict[str, Any]]:
    """attempt number -> the merged start and end records the batch job wrote."""
    out: dict[int, dict[str, Any]] = {}
    folder = run_dir / "attempts"
    if not folder.is_dir():
        return out
    # Start records (<n>.json) first, then end records (<n>.end.json) on top of them.
    for path in sorted(folder.glob("*.json"), key=lambda p: (p.name.endswith(".end.json"), p.name)):
        stem = path.name.split(".")[0]
        if not stem.isdigit():
            continue
        try:
            data = read_json(path, "attempt record")
        except FileNotFoundError:
            continue
        out.setdefault(int(stem), {}).update(data)
    return out
