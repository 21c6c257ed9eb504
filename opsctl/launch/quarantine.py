"""Nodes that failed under a run: never placed again until an operator releases them.

The list outlives attempts and runs (one JSON file beside the audit log); `opsctl resume` of a
node does not clear it, releasing is a separate, deliberate act (`opsctl quarantine release`,
see opsctl.launch.quarantine_ops).

Writers (`opsctl watch --remediate`, operators) hold an exclusive lock on a sibling lock file
while they re-read, change and rewrite the file, so concurrent writers never lose an entry;
readers need no lock because every write is an atomic rename.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from opsctl.errors import ConfigError
from opsctl.launch.fileio import read_json, write_json


@dataclass
class QuarantineEntry:
    node: str
    reason: str
    run_id: str = ""
    job_id: int = 0
    time: float = 0.0
    user: str = ""  # the operator who added it by hand; empty when a run's watcher did


_ENTRY_FIELDS = {f.name: f.type for f in fields(QuarantineEntry)}


def _entry(path: Path, raw: Any) -> QuarantineEntry:
    """One entry of the file, checked field by field: a damaged file is a one-line error."""
    if not isinstance(raw, dict) or not isinstance(raw.get("node"), str) or not raw["node"]:
        raise ConfigError(f"quarantine file {path} is malformed: an entry without a node name: {raw!r:.80}")
    known = {k: v for k, v in raw.items() if k in _ENTRY_FIELDS}  # keys from newer versions are kept out
    try:
        entry = QuarantineEntry(**known)
    except TypeError as exc:
        raise ConfigError(f"quarantine file {path} is malformed: {raw['node']}: {exc}") from None
    kinds: dict[str, type | tuple[type, ...]] = {
        "reason": str, "run_id": str, "user": str, "job_id": int, "time": (int, float)}
    for key, kind in kinds.items():
        value = getattr(entry, key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"quarantine file {path} is malformed: {entry.node}: {key} is {value!r}")
    entry.time = float(entry.time)
    return entry


@dataclass
class Quarantine:
    path: Path
    entries: dict[str, QuarantineEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path) -> Quarantine:
        """The list as the file holds it now (none when the file does not exist yet).

        ConfigError (exit 2) when the file cannot be read or is not a quarantine list."""
        p = Path(path)
        try:
            data = read_json(p, "quarantine file")
        except FileNotFoundError:
            return cls(p)
        if not isinstance(data, dict) or not isinstance(data.get("nodes", []), list):
            raise ConfigError(f"quarantine file {p} is malformed: expected an object with a \"nodes\" list")
        entries: dict[str, QuarantineEntry] = {}
        for raw in data.get("nodes", []):
            entry = _entry(p, raw)
            entries[entry.node] = entry
        return cls(p, entries)

    @classmethod
    @contextmanager
    def locked(cls, path: str | Path) -> Iterator[Quarantine]:
        """The freshly read list, under the writers' lock; call `save()` inside to change it."""
        p = Path(path)
        lock = p.with_name(f".{p.name}.lock")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"quarantine file {p}: cannot take the lock {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield cls.load(p)
        finally:
            os.close(fd)  # closing releases the lock

    @property
    def nodes(self) -> set[str]:
        return set(self.entries)

    def add(self, node: str, reason: str, run_id: str = "", job_id: int = 0) -> bool:
        """Quarantine a node (re-read under the lock so concurrent writers do not lose entries)."""
        with Quarantine.locked(self.path) as fresh:
            self.entries = fresh.entries
            if node in self.entries:
                return False
            self.entries[node] = QuarantineEntry(node, reason, run_id, job_id, round(time.time(), 3))
            self.save()
            return True

    def release(self, node: str) -> bool:
        with Quarantine.locked(self.path) as fresh:
            self.entries = fresh.entries
            if self.entries.pop(node, None) is None:
                return False
            self.save()
            return True

    def save(self) -> None:
        try:
            write_json(self.path, {"nodes": [asdict(e) for _, e in sorted(self.entries.items())]})
        except OSError as exc:
            raise ConfigError(f"quarantine file {self.path} is not writable: {exc.strerror}") from None
