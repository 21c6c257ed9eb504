"""Running host commands as argv lists (never through a shell), with errors that say what failed."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from opsctl.errors import OpsctlError


class LabCommandError(OpsctlError):
    """A host command the lab needs failed; the message carries its stderr tail."""


def run(
    argv: Sequence[str | Path],
    *,
    check: bool = True,
    timeout: float | None = 600,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    args = [str(a) for a in argv]
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=input_text,
            check=False,
        )
    except FileNotFoundError:
        raise LabCommandError(f"{args[0]} not found; run scripts/bootstrap.sh as root") from None
    except subprocess.TimeoutExpired:
        raise LabCommandError(f"{' '.join(args[:4])} ... timed out after {timeout}s") from None
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise LabCommandError(f"{' '.join(args[:6])} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return proc
