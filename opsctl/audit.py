"""The audit log: one JSON object per line for every drain/resume action, refusals and dry-runs too.

Records are appended under an exclusive lock so concurrent opsctl runs never interleave lines.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opsctl.errors import ConfigError


@dataclass
class AuditRecord:
    action: str  # drain | resume | quarantine-add | quarantine-release
    nodes: list[str]
    result: str  # applied | dry-run | refused | failed | noop
    reason: str = ""
    detail: str = ""
    forced: bool = False
    time: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    user: str = field(default_factory=lambda: current_user())
    host: str = field(default_factory=socket.gethostname)


def current_user() -> str:
    """The human behind the action: SUDO_USER when run through sudo, else the login name."""
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user:
        return sudo_user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


class AuditLog:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def check_writable(self) -> None:
        """Fail before acting if the log cannot be written: an action must never go unrecorded."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise ConfigError(f"audit log {self.path} is not writable: {exc.strerror}") from None

    def append(self, record: AuditRecord) -> None:
        line = json.dumps(asdict(record), sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError as exc:
            raise ConfigError(f"audit log {self.path} is not writable: {exc.strerror}") from None

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
