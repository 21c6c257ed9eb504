"""The sandbox for model-written code (training/sandbox.py) against real bubblewrap, as root (what the
CI and the nodes run as): a fork bomb, an infinite loop, a memory hog, a network attempt, a write
outside the sandbox and an oversized file each fail without harming anything else, and the next
program in the same slot runs normally."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from training.sandbox import SANDBOX_UID_BASE, Limits, Sandbox, SandboxUnavailable, uid_processes

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap (bootstrap installs it)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops to its own uids: needs root"),
]


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(Limits(wall_s=4.0, cpu_s=2, memory_mib=512, processes=32, file_mib=8), slots=1)


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback port on the host that accepts connections: the sandbox must not reach it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    accepted: list[socket.socket] = []
    t = threading.Thread(target=lambda: accepted.append(sock.accept()[0]), daemon=True)
    t.start()
    yield int(sock.getsockname()[1])
    sock.close()
    assert not accepted, "the sandbox reached a host port"


def test_a_program_runs_and_prints(sandbox: Sandbox) -> None:
    r = sandbox.run("import sys\nprint(sum(range(10)))\nprint('err', file=sys.stderr)")
    assert r.ok and r.stdout == "45\n" and r.stderr == "err\n"
    r = sandbox.run("raise SystemExit(3)")
    assert not r.ok and r.exit_code == 3


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"


@pytest.mark.parametrize(("name", "code", "why"), [
    ("fork bomb", FORK_BOMB, "timeout"),
    ("infinite loop", "while True:\n    pass\n", "cpu"),
    ("memory hog", "x = bytearray(4 * 1024**3)\n", "MemoryError"),
    ("oversized file", "open('/tmp/f', 'wb').write(b'0' * (64 * 1024 * 1024))\n", "File too large"),
])
def test_bad_code_fails_and_the_slot_is_clean_after(sandbox: Sandbox, name: str, code: str, why: str) -> None:
    r = sandbox.run(code)
    assert not r.ok, name
    if why == "timeout":
        assert r.timed_out and r.elapsed_s < 10
    elif why == "cpu":  # SIGKILL at the CPU limit, or the wall clock first on a loaded machine
        assert r.exit_code in (-9, 137) and r.elapsed_s < 10
    else:
        assert why in r.stderr
    assert uid_processes(SANDBOX_UID_BASE) == []  # nothing of it is left running
    assert sandbox.run("print('next')").stdout == "next\n"  # the same slot works at once


def test_no_network_not_even_the_hosts_loopback(sandbox: Sandbox, listener: int) -> None:
    r = sandbox.run(f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=2)\n")
    assert not r.ok and "ConnectionRefusedError" in r.stderr
    r = sandbox.run("import socket\nsocket.getaddrinfo('deb.debian.org', 80)\n")
    assert not r.ok and "gaierror" in r.stderr


def test_nothing_outside_its_tmp_can_be_written(sandbox: Sandbox) -> None:
    # a host directory outside /tmp (the sandbox's /tmp is its own tmpfs; a checkout may lie in /tmp)
    target = Path("/var/tmp") / f"sandbox-escape-{uuid.uuid4().hex[:8]}"
    r = sandbox.run(f"open({str(target)!r}, 'w').write('x')\n")
    assert not r.ok and "Read-only file system" in r.stderr and not target.exists()
    # its /tmp is its own and gone afterwards
    assert sandbox.run("open('/tmp/mine', 'w').write('x')\nprint(open('/tmp/mine').read())").stdout == "x\n"
    assert sandbox.run("import os\nprint(os.path.exists('/tmp/mine'))").stdout == "False\n"


def test_it_runs_as_its_own_unprivileged_uid(sandbox: Sandbox) -> None:
    r = sandbox.run("import os\nprint(os.getuid(), os.getgroups())\nos.setuid(0)\n")
    assert not r.ok and "Error" in r.stderr  # root is not even mapped in its user namespace
    assert r.stdout.split()[0] == str(SANDBOX_UID_BASE)


def test_a_sandbox_that_cannot_start_is_an_error_not_a_wrong_program() -> None:
    with pytest.raises(SandboxUnavailable, match="not executable"):
        Sandbox(python="/nonexistent/python3")
