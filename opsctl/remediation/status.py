"""What the service's last pass saw and did, written atomically after every pass so that
``opsctl remediator status`` (another process, possibly another user) can show it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opsctl.launch.fileio import write_json

# decisions worth showing: what the service did or would have done; "none" and "keep" are the
# steady state of every healthy or already-drained node
SHOWN_ACTIONS = ("drain", "resume", "hold", "alert")
# drains and resumes happen once per node (holds and alerts repeat every pass while they hold):
# the last few are kept across passes and restarts, so status shows what the service last did
RECENT_ACTIONS = ("drain", "resume")
RECENT_KEPT = 20


@dataclass
class PassStatus:
    time: float  # start of the pass (epoch seconds)
    number: int  # passes since the service started
    ok: bool
    duration_s: float
    interval: float
    pid: int = field(default_factory=os.getpid)
    error: str = ""  # why the pass failed ("" when it ran)
    mode: str = ""  # apply | shadow (run_health's remediation mode)
    paused: bool = False
    refusal: str = ""  # remediation refused by policy, with the reason
    counts: dict[str, int] = field(default_factory=dict)  # node status -> nodes
    decisions: list[dict[str, Any]] = field(default_factory=list)  # this pass's, SHOWN_ACTIONS only
    # the last RECENT_KEPT drains and resumes, oldest first, each with its pass's time and mode
    recent: list[dict[str, Any]] = field(default_factory=list)
    last_success: float = 0.0  # start of the last pass that ran (0: none yet)
    errors: int = 0  # failed passes since the service started

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.time

    def stale(self, now: float | None = None) -> bool:
        """No successful pass within three intervals: the service is stopped, stuck or failing."""
        now = time.time() if now is None else now
        return not self.last_success or now - self.last_success > 3 * self.interval + self.duration_s


def write_status(path: str | os.PathLike[str], status: PassStatus) -> None:
    write_json(Path(path), status.to_json())


def read_status(path: str | os.PathLike[str]) -> PassStatus | None:
    """The last pass recorded, or None when there is none (or the file is not one of ours)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return PassStatus(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        return None
