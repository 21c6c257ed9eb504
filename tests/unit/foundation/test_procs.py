"""The managed-process registry with real processes (sleep, sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from opsctl.sim.procs import ProcessRegistry, is_running


def test_spawn_stop_and_pidfile(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "run", tmp_path / "log")
    info = reg.spawn("sleeper", ["sleep", "300"])
    try:
        assert reg.alive("sleeper") and (tmp_path / "run" / "sleeper.json").exists()
        assert os.getpgid(info.pid) == info.pid  # its own process group
        with pytest.raises(RuntimeError, match="already running"):
            reg.spawn("sleeper", ["sleep", "300"])
        # Another registry (another process, in real use) sees and stops it through the pidfile.
        other = ProcessRegistry(tmp_path / "run", tmp_path / "log")
        assert other.names() == ["sleeper"] and other.alive("sleeper")
        other.stop("sleeper")
        reg.alive("sleeper")  # reap our child
        assert not is_running(info.pid)
        assert not (tmp_path / "run" / "sleeper.json").exists()
    finally:
        reg.stop("sleeper")


def test_stop_kills_the_whole_group_and_escalates(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "run", tmp_path / "log")
    # A parent that ignores SIGTERM, with a child in the same group.
    info = reg.spawn("stubborn", ["sh", "-c", "trap '' TERM; sleep 300 & wait"])
    try:
        children = []
        for _ in range(50):
            out = subprocess.run(["pgrep", "-g", str(info.pid)], capture_output=True, text=True, check=False)
            children = [int(p) for p in out.stdout.split() if int(p) != info.pid]
            if children:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert children
        reg.stop("stubborn", timeout=1.0)
        assert not is_running(info.pid)
        assert not any(is_running(c) for c in children)
    finally:
        reg.stop("stubborn", timeout=1.0)


def test_dead_or_reused_pids_are_not_alive(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "run", tmp_path / "log")
    info = reg.spawn("quick", ["true"])
    for _ in range(100):
        if not reg.alive("quick"):
            break
        subprocess.run(["sleep", "0.05"], check=True)
    assert not reg.alive("quick")
    # Same pid, different start time: not ours.
    assert not is_running(os.getpid(), ticks=1)
    assert is_running(os.getpid())
    reg.stop("quick")
    assert info.pid > 0


def test_invalid_names_are_rejected(tmp_path: Path) -> None:
    reg = ProcessRegistry(tmp_path / "run", tmp_path / "log")
    with pytest.raises(ValueError):
        reg.spawn("../evil", ["true"])
