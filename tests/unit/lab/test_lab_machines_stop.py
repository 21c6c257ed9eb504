"""`lab down` returns only when its machines are gone: nspawn and the machine's own init (PID 1 of
its namespace) alike. Real processes stand in for them: a parent that exits on SIGTERM at once,
and a child that ignores SIGTERM, as a machine's init can outlive its nspawn."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from opsctl.lab.machines import NspawnProcess, stop

# the "nspawn": starts the "init", which ignores SIGTERM and would be reparented when nspawn dies
_INIT = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(%r, 'w'); time.sleep(300)"
_NSPAWN = """
import signal, subprocess, sys, time
init = subprocess.Popen([sys.executable, "-c", INIT % sys.argv[1]])
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(300)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X") and not [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return out


def test_stop_returns_only_when_the_machines_init_is_gone_too(tmp_path: Path) -> None:
    ready = tmp_path / "init-up"
    code = f"INIT = {_INIT!r}\n{_NSPAWN}"
    nspawn = subprocess.Popen([sys.executable, "-c", code, str(ready)], start_new_session=True)
    init = 0
    try:
        for _ in range(200):
            if ready.exists():
                break
            time.sleep(0.05)
        (init,) = _children(nspawn.pid)
        stop([NspawnProcess(nspawn.pid, "gpu-001")], grace=1.0)
        nspawn.poll()
        assert _gone(nspawn.pid) and _gone(init)
    finally:
        for pid in (nspawn.pid, init):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
        nspawn.wait(timeout=10)
