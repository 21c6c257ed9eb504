"""`scripts/lock.py refresh --keep`: adding a dependency resolves only what is new; every package
the lock already pins keeps its version (a full refresh would move them all, torch's stack
included, to whatever the index has today). Resolves through pip's index; about 10 s."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _pins(lock: Path) -> dict[str, str]:
    return dict(
        line.split("==", 1) for line in lock.read_text().splitlines() if line and not line.startswith("#")
    )


def test_keep_adds_a_new_dependency_and_moves_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "lock.py", tmp_path / "scripts" / "lock.py")
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    pyproject = (REPO / "pyproject.toml").read_text()
    marker = '    "pytest-timeout>=2.3,<3",\n'
    assert marker in pyproject
    (tmp_path / "pyproject.toml").write_text(pyproject.replace(marker, marker + '    "iniconfig>=1",\n'))
    before = _pins(tmp_path / "locks" / "cpu.txt")
    lock = [sys.executable, str(tmp_path / "scripts" / "lock.py")]
    stale = subprocess.run([*lock, "check"], capture_output=True, text=True, timeout=60, check=False)
    assert stale.returncode == 1 and "run `make lock`" in stale.stdout + stale.stderr
    done = subprocess.run([*lock, "refresh", "--keep", "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = _pins(tmp_path / "locks" / "cpu.txt")
    assert {k: v for k, v in after.items() if k in before} == before  # iniconfig was pinned already
    ok = subprocess.run([*lock, "check"], capture_output=True, text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
