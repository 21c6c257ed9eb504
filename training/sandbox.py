"""A sandbox for model-written code: bubblewrap, no network, a read-only root, a private /tmp, and
limits on CPU, memory, processes, file size and wall time.

Each program runs as `python3 -I -` (the code on stdin) inside `bwrap --unshare-all`: its own
network namespace (no interface but loopback, nothing listening), its own PID namespace (killing
bubblewrap kills every process inside), the host's root bound read-only, a fresh tmpfs at /tmp.
The limits are rlimits, set before bubblewrap starts, under an unprivileged uid of the sandbox's
own: the kernel never applies RLIMIT_NPROC to root, and a uid per concurrent slot keeps one
program's fork bomb from using up another's process budget. Wall time is enforced from outside
(SIGKILL to bubblewrap, whose PID-namespace init takes everything inside with it). cgroup v2 limits
would be the production form where the node delegates a cgroup to the job; these machines have none.

A sandbox that cannot start (no bubblewrap, no user namespaces) raises SandboxUnavailable: that
is not a wrong program, and must never be scored as one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

SANDBOX_UID_BASE = 64000  # slot k runs as uid/gid 64000 + k (no passwd entry needed)


class SandboxUnavailable(RuntimeError):
    """The sandbox itself could not run (a setup problem, not the program's fault)."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 5.0  # killed after this long, whatever it does
    cpu_s: int = 2  # RLIMIT_CPU: SIGXCPU, then SIGKILL
    memory_mib: int = 512  # RLIMIT_AS (address space) of each process
    processes: int = 32  # RLIMIT_NPROC for the slot's uid: bubblewrap and python count too
    file_mib: int = 16  # RLIMIT_FSIZE: the largest file it may write (in its /tmp)
    output_bytes: int = 64 * 1024  # stdout and stderr kept (each)


@dataclass
class Result:
    exit_code: int  # negative: killed by that signal
    stdout: str
    stderr: str
    timed_out: bool
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def bwrap_argv(python: str = "/usr/bin/python3") -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    if not os.access(python, os.X_OK):  # checked here: inside, a failed exec looks like a failed program
        raise SandboxUnavailable(f"the sandbox's interpreter {python} is not executable")
    return [
        bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
        # --as-pid-1: the program is its namespace's init (no bubblewrap monitor process, which
        # outlives the run as a zombie until the host's init reaps it and counts against NPROC)
        "--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--chdir", "/tmp",
        python, "-I", "-",
    ]


def limit_tools() -> tuple[str, str]:
    """util-linux's prlimit and setpriv, found once per sandbox."""
    prlimit, setpriv = shutil.which("prlimit"), shutil.which("setpriv")
    if prlimit is None or setpriv is None:
        raise SandboxUnavailable("util-linux's prlimit and setpriv are needed to set the sandbox's limits")
    return prlimit, setpriv


def limits_argv(limits: Limits, uid: int, tools: tuple[str, str]) -> list[str]:
    """prlimit (the limits, set as root) then setpriv (the slot's uid) in front of bubblewrap:
    exec'd wrappers instead of a Python pre-exec hook, because a hook forces a full fork of the
    (large) calling process for every program, ten times the cost of the program's start."""
    prlimit, setpriv = tools
    mib = 1024 * 1024
    argv = [prlimit, f"--cpu={limits.cpu_s}", f"--as={limits.memory_mib * mib}",
            f"--nproc={limits.processes}", f"--fsize={limits.file_mib * mib}", "--core=0", "--nofile=64",
            "--"]
    if os.getuid() == 0:
        argv += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    return argv


class Sandbox:
    """Runs programs, at most `slots` at once (each slot its own uid)."""

    def __init__(self, limits: Limits | None = None, slots: int = 4,
                 python: str = "/usr/bin/python3") -> None:
        self.limits = limits or Limits()
        self.argv = bwrap_argv(python)
        self.tools = limit_tools()
        self._free = list(range(slots))
        self._cv = threading.Condition()

    def _slot(self) -> int:
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop()

    def _release(self, slot: int) -> None:
        with self._cv:
            self._free.append(slot)
            self._cv.notify()

    def run(self, code: str) -> Result:
        slot = self._slot()
        try:
            return self._run(code, SANDBOX_UID_BASE + slot)
        finally:
            self._release(slot)

    def _run(self, code: str, uid: int) -> Result:
        lim = self.limits
        status_r, status_w = os.pipe()  # bubblewrap reports {"child-pid": N} once the program started
        t0 = time.monotonic()
        try:
            argv = [*limits_argv(lim, uid, self.tools), self.argv[0], "--json-status-fd", str(status_w),
                    *self.argv[1:]]
            pipe = subprocess.PIPE
            proc = subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True,
                                    pass_fds=(status_w,))
        except OSError as exc:
            os.close(status_r)
            raise SandboxUnavailable(f"bubblewrap did not start: {exc}") from None
        finally:
            os.close(status_w)
        timed_out = False
        try:
            out, err = proc.communicate(code.encode(), timeout=lim.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
            out, err = proc.communicate()
        _reap_uid(uid)  # the next program in this slot starts with its whole process budget
        elapsed = time.monotonic() - t0
        with os.fdopen(status_r, "rb") as fh:
            status = fh.read()
        text_err = err[: lim.output_bytes].decode(errors="replace")
        if b"child-pid" not in status:  # the sandbox never ran the program: not the program's failure
            why = text_err.strip().splitlines()[0] if text_err.strip() else f"exit {proc.returncode}"
            raise SandboxUnavailable(f"bubblewrap could not start the program: {why}")
        return Result(proc.returncode, out[: lim.output_bytes].decode(errors="replace"), text_err, timed_out,
                      elapsed)


def uid_processes(uid: int) -> list[int]:
    """Live pids whose real uid is `uid` (read from /proc). Zombies are left out: they run nothing,
    and bubblewrap's namespace process becomes one for as long as the host's init takes to reap it
    (seconds in some containers). Runs after every program, so it reads only the two fields."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue  # gone meanwhile
        match = _UID_FIELD.search(status)
        if match is not None and int(match[1]) == uid and not _ZOMBIE.search(status):
            pids.append(int(entry))
    return pids


_UID_FIELD = re.compile(rb"^Uid:\s+(\d+)", re.MULTILINE)  # the real uid comes first
_ZOMBIE = re.compile(rb"^State:\s+Z", re.MULTILINE)


def _reap_uid(uid: int, timeout_s: float = 5.0) -> None:
    """Wait until no process of the slot's uid is left: the kernel takes a PID namespace down
    asynchronously; a straggler still there at the end is killed (the uid is the sandbox's own)."""
    deadline = time.monotonic() + timeout_s
    while (pids := uid_processes(uid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bubblewrap's session: its PID namespace's init dies with it, and every process inside."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
