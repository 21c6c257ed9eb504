"""A registry of managed processes for the simulated cluster: spawn with a pidfile, stop by
process group, tell alive from dead (zombies and reused pids count as dead).

Every daemon runs in the foreground in its own session, so its process group is ours to signal;
the pidfile (`run/NAME.json`: pid, start time, argv) lets another process (`opsctl sim down`)
stop what this one started.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class ProcInfo:
    name: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str


@dataclass
class ProcStatus:
    name: str
    pid: int
    alive: bool
    rss_kib: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22 (starttime) overall


def is_running(pid: int, ticks: int | None = None) -> bool:
    """True if `pid` is a live process, and the same one when `ticks` is given.

    A zombie is dead, except a thread group leader whose main thread has left while other threads
    still run (a daemon finishing its shutdown in a thread reads "Z" until its last thread ends)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "X" or (fields[0] == "Z" and not _other_threads(pid)):
        return False
    return ticks is None or int(fields[19]) == ticks


def group_members(pgid: int) -> list[int]:
    """The running processes of process group `pgid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and int(fields[2]) == pgid and is_running(int(entry.name)):
            out.append(int(entry.name))
    return out


def _other_threads(pid: int) -> bool:
    """Whether `pid` has live threads besides its leader."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(t != str(pid) for t in tasks)


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class ProcessRegistry:
    def __init__(self, run_dir: Path, log_dir: Path) -> None:
        self.run_dir = run_dir
        self.log_dir = log_dir
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> ProcInfo:
        """Start `argv` (foreground daemon) in a new session, logging to log/NAME.log."""
        if not _NAME_RE.match(name):
            raise ValueError(f"invalid process name {name!r}")
        existing = self.info(name)
        if existing and is_running(existing.pid, existing.start_ticks):
            raise RuntimeError(f"process {name!r} is already running (pid {existing.pid})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            )
        ticks = start_ticks(proc.pid) or 0
        info = ProcInfo(name=name, pid=proc.pid, start_ticks=ticks, argv=list(argv), log=str(log_path))
        tmp = self._pidfile(name).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(info)))
        tmp.replace(self._pidfile(name))
        self._children[name] = proc
        return info

    def info(self, name: str) -> ProcInfo | None:
        try:
            data = json.loads(self._pidfile(name).read_text())
        except (OSError, ValueError):
            return None
        return ProcInfo(**data)

    def names(self) -> list[str]:
        if not self.run_dir.is_dir():
            return []
        return sorted(p.stem for p in self.run_dir.glob("*.json"))

    def alive(self, name: str) -> bool:
        child = self._children.get(name)
        if child is not None:
            child.poll()  # reap it if it exited, so it does not linger as a zombie
        info = self.info(name)
        return bool(info and is_running(info.pid, info.start_ticks))

    def status(self) -> list[ProcStatus]:
        out = []
        for name in self.names():
            info = self.info(name)
            if info is None:
                continue
            alive = self.alive(name)
            rss = rss_kib(info.pid) if alive else 0
            out.append(ProcStatus(name=name, pid=info.pid, alive=alive, rss_kib=rss))
        return out

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after `timeout`, wait, drop the pidfile."""
        info = self.info(name)
        # a group outlives its leader only while it has members, so its pgid cannot have been reused
        if info is not None and (is_running(info.pid, info.start_ticks) or group_members(info.pid)):
            _signal_group(info.pid, signal.SIGTERM)
            if not self._wait_dead(name, info, timeout):
                _signal_group(info.pid, signal.SIGKILL)
                self._wait_dead(name, info, 10.0)
        child = self._children.pop(name, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
        self._pidfile(name).unlink(missing_ok=True)

    def stop_many(self, names: Sequence[str], timeout: float = 10.0) -> None:
        """Stop several at once: signal all, then wait (64 slurmd stop in seconds, not minutes)."""
        infos = [(n, self.info(n)) for n in names]
        live = [(n, i) for n, i in infos if i is not None and is_running(i.pid, i.start_ticks)]
        for _, info in live:
            _signal_group(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, info in live:
            if not self._wait_dead(name, info, max(0.0, deadline - time.monotonic())):
                _signal_group(info.pid, signal.SIGKILL)
        for name in names:
            self.stop(name, timeout=1.0)

    def _wait_dead(self, name: str, info: ProcInfo, timeout: float) -> bool:
        """Until the process and every other process of its group (spawned with pgid == pid: a
        daemon's children, a job's processes) are gone; False after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            child = self._children.get(name)
            if child is not None:
                child.poll()
            if not is_running(info.pid, info.start_ticks) and not group_members(info.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # spawned with a new session: pgid == pid
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# Daemons the sweep may look for: a slurmstepd runs in a session of its own (so stopping slurmd's
# process group misses it) together with the job's processes.
_SWEEP_COMMS = {"slurmstepd", "slurmd", "slurmctld", "slurmscriptd", "munged"}


def sweep_strays(root: Path, timeout: float = 10.0) -> list[int]:
    """Kill Slurm/munge daemons left behind under `root` (cwd or argv inside it) and every process
    in their sessions (a job's processes). Never this process, its session or its ancestors."""
    root_s = str(root.resolve())
    me = os.getpid()
    protected = {me}
    pid = os.getppid()
    while pid > 1:
        protected.add(pid)
        fields = _stat_fields(pid)
        pid = int(fields[1]) if fields else 1
    my_sid = os.getsid(0)
    sids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in protected:
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm not in _SWEEP_COMMS:
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmdline = ""
        if cwd == root_s or cwd.startswith(root_s + "/") or root_s + "/" in cmdline:
            fields = _stat_fields(pid)
            if fields and fields[0] not in {"Z", "X"}:
                sid = int(fields[3])
                if sid != my_sid:
                    sids.add(sid)
    victims = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = _stat_fields(pid)
        if pid in protected or not fields or fields[0] in {"Z", "X"}:
            continue
        if int(fields[3]) in sids:
            victims.append(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout / 2
        while time.monotonic() < deadline and any(is_running(p) for p in victims):
            time.sleep(0.05)
        victims = [p for p in victims if is_running(p)]
        if not victims:
            break
    return victims
