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


# A daemon whose main thread leaves first on SIGTERM while another thread finishes the shutdown
# (slurmctld saving its state): the thread group leader reads as a zombie ("Z") in /proc while the
# process still runs. `sim down` once returned here with slurmctld still alive.
_LEADER_LEAVES_FIRST = """
import ctypes, os, signal, sys, threading, time
stop = threading.Event()
def shutdown():
    stop.wait()
    while not os.path.exists(sys.argv[1]):  # the test says when the shutdown work is done
        time.sleep(0.02)
signal.signal(signal.SIGTERM, lambda *a: stop.set())
threading.Thread(target=shutdown).start()
signal.pause()
ctypes.CDLL(None).pthread_exit(None)
"""


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []


def test_a_process_whose_main_thread_left_is_running_until_its_last_thread_ends(tmp_path: Path) -> None:
    import sys
    import threading
    import time

    reg = ProcessRegistry(tmp_path / "run", tmp_path / "log")
    done = tmp_path / "shutdown-done"
    info = reg.spawn("ctld", [sys.executable, "-c", _LEADER_LEAVES_FIRST, str(done)])
    try:
        for _ in range(200):  # until its shutdown thread exists
            if len(_tasks(info.pid)) == 2:
                break
            time.sleep(0.05)
        os.kill(info.pid, 15)
        for _ in range(200):  # until the main thread has left
            if Path(f"/proc/{info.pid}/stat").read_text().split(") ")[1][0] == "Z":
                break
            time.sleep(0.05)
        assert len(_tasks(info.pid)) == 2  # the leader gone, its shutdown thread still working
        assert is_running(info.pid, info.start_ticks) and reg.alive("ctld")
        threading.Timer(1.0, done.touch).start()
        reg.stop("ctld", timeout=10.0)
        assert done.exists() and _tasks(info.pid) == []  # stop returned once the process was gone
    finally:
        done.touch()
        reg.stop("ctld")
