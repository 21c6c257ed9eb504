"""Verdicts: what a check concluded about one node (or one GPU/port of it), with its evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


# Worst-first ordering for rolling verdicts up to a node status.
_RANK = {Status.OK: 0, Status.WARN: 1, Status.UNKNOWN: 2, Status.FAIL: 3}


def worst(statuses: list[Status]) -> Status:
    return max(statuses, key=lambda s: _RANK[s], default=Status.OK)


@dataclass
class Verdict:
    code: str  # stable check code, e.g. "gpu-xid"; used in drain reasons and alerts
    status: Status
    node: str
    gpu: int | None
    summary: str  # short, human: "xid 79 (reboot) on gpu 3"
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def short_evidence(self) -> str:
        """The few words that go into a drain reason after ``opsctl:<code>:``."""
        return self.evidence.get("short", self.summary)[:60]

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "status": self.status.value,
            "node": self.node,
            "gpu": self.gpu,
            "summary": self.summary,
            "evidence": self.evidence,
        }
