"""The operator's pause: a small JSON file (who, when, why) whose presence puts the service in
shadow mode. Written atomically; every change goes to the shared audit log.

A pause file that cannot be read counts as a pause: when in doubt, the service does not act.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opsctl.audit import AuditLog, AuditRecord, current_user
from opsctl.errors import ConfigError, UsageError
from opsctl.launch.fileio import write_json

PAUSE, UNPAUSE = "remediator-pause", "remediator-unpause"


@dataclass
class Pause:
    by: str
    since: str  # UTC, ISO 8601
    reason: str
    host: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_pause(path: str | os.PathLike[str]) -> Pause | None:
    """The pause in force, or None. An unreadable file is a pause whose reason says so."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return Pause(by=str(data["by"]), since=str(data["since"]), reason=str(data["reason"]),
                     host=str(data.get("host", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Pause(by="?", since="?", reason=f"pause file {p} unreadable ({type(exc).__name__}); "
                     "treated as paused")


def pause(path: str | os.PathLike[str], audit: AuditLog, reason: str) -> tuple[Pause, str]:
    """Pause the service; returns the pause in force and the result (applied | noop)."""
    reason = " ".join(reason.split())
    if not reason:
        raise UsageError("--reason must say why remediation is paused")
    audit.check_writable()
    current = read_pause(path)
    if current is not None:
        audit.append(AuditRecord(action=PAUSE, nodes=[], result="noop", reason=reason,
                                 detail=f"already paused by {current.by} since {current.since}"))
        return current, "noop"
    new = Pause(by=current_user(), since=datetime.now(UTC).isoformat(timespec="seconds"), reason=reason,
                host=socket.gethostname())
    try:
        write_json(Path(path), new.to_json())
    except OSError as exc:
        audit.append(AuditRecord(action=PAUSE, nodes=[], result="failed", reason=reason, detail=str(exc)))
        raise ConfigError(f"pause file {path} is not writable: {exc.strerror}") from None
    audit.append(AuditRecord(action=PAUSE, nodes=[], result="applied", reason=reason,
                             detail="remediation in shadow mode until unpaused"))
    return new, "applied"


def unpause(path: str | os.PathLike[str], audit: AuditLog, reason: str = "") -> tuple[Pause | None, str]:
    """Lift the pause; returns the pause that was lifted (None if there was none) and the result."""
    audit.check_writable()
    current = read_pause(path)
    if current is None:
        audit.append(AuditRecord(action=UNPAUSE, nodes=[], result="noop", reason=reason, detail="not paused"))
        return None, "noop"
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as exc:
        audit.append(AuditRecord(action=UNPAUSE, nodes=[], result="failed", reason=reason, detail=str(exc)))
        raise ConfigError(f"pause file {path} cannot be removed: {exc.strerror}") from None
    audit.append(AuditRecord(action=UNPAUSE, nodes=[], result="applied", reason=reason,
                             detail=f"paused by {current.by} since {current.since}: {current.reason}"))
    return current, "applied"
