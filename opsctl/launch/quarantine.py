"""Nodes that failed under a run: never placed again until an operator releases them.

The list outlives attempts and runs (one JSON file beside the audit log); `opsctl resume` of a
node does not clear it, releasing is a separate, deliberate act.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opsctl.launch.fileio import read_json, write_json


@dataclass
class QuarantineEntry:
    node: str
    reason: str
    run_id: str = ""
    job_id: int = 0
    time: float = 0.0


@dataclass
class Quarantine:
    path: Path
    entries: dict[str, QuarantineEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Quarantine:
        p = Path(path)
        try:
            data = read_json(p, "quarantine file")
        except FileNotFoundError:
            return cls(p)
        entries = {e["node"]: QuarantineEntry(**e) for e in data.get("nodes", [])}
        return cls(p, entries)

    @property
    def nodes(self) -> set[str]:
        return set(self.entries)

    def add(self, node: str, reason: str, run_id: str = "", job_id: int = 0) -> bool:
        """Quarantine a node (re-reads the file first so concurrent runs do not lose entries)."""
        fresh = Quarantine.load(self.path)
        self.entries = fresh.entries
        if node in self.entries:
            return False
        self.entries[node] = QuarantineEntry(node, reason, run_id, job_id, round(time.time(), 3))
        self.save()
        return True

    def release(self, node: str) -> bool:
        fresh = Quarantine.load(self.path)
        self.entries = fresh.entries
        if self.entries.pop(node, None) is None:
            return False
        self.save()
        return True

    def save(self) -> None:
        write_json(self.path, {"nodes": [asdict(e) for _, e in sorted(self.entries.items())]})
