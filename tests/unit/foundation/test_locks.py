"""The lock files (locks/cpu.txt, locks/cuda.txt) against pyproject and this environment, through
the real `scripts/lock.py check`, on copies of the tree where pyproject or a lock was changed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "lock.py"), "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The files `lock.py check` reads, copied so that a test can change them."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "lock.py", tmp_path / "scripts" / "lock.py")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    return tmp_path


def pins(lock: Path) -> dict[str, str]:
    return dict(
        line.split("==", 1) for line in lock.read_text().splitlines() if line and not line.startswith("#")
    )


def test_the_locks_agree_with_pyproject_and_this_environment() -> None:
    # The environment the tests run in was installed from locks/cpu.txt (scripts/bootstrap.sh).
    proc = check(REPO, "--installed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agree with pyproject and this environment" in proc.stdout


def test_a_dependency_changed_in_pyproject_without_a_refresh_fails(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    assert '"transformers>=5,<6"' in text
    # Still satisfied by the pinned version, so only the recorded inputs tell the lock is stale.
    pyproject.write_text(text.replace('"transformers>=5,<6"', '"transformers>=5.1,<6"'))
    proc = check(tree)
    assert proc.returncode == 1
    assert proc.stdout.count("other pyproject requirements than today's") == 2  # cpu and cuda
    assert "make lock" in proc.stdout


def test_a_new_dependency_missing_from_the_locks_fails(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text().replace('"pyyaml>=6,<7",', '"pyyaml>=6,<7",\n    "zstandard>=0.22",')
    pyproject.write_text(text)
    proc = check(tree)
    assert proc.returncode == 1
    assert "locks/cpu.txt: zstandard is required by pyproject but not pinned" in proc.stdout
    assert "locks/cuda.txt: zstandard is required by pyproject but not pinned" in proc.stdout


def test_a_pin_outside_pyprojects_range_fails(tree: Path) -> None:
    lock = tree / "locks" / "cpu.txt"
    lock.write_text(re.sub(r"(?m)^click==.*$", "click==7.1.2", lock.read_text()))
    proc = check(tree)
    assert proc.returncode == 1
    assert "locks/cpu.txt: click==7.1.2 does not satisfy pyproject's 'click>=8.1,<9'" in proc.stdout
    assert "locks/cuda.txt" not in proc.stdout


def test_this_environment_differing_from_the_lock_fails(tree: Path) -> None:
    lock = tree / "locks" / "cpu.txt"
    installed = pins(lock)["rich"]
    lock.write_text(re.sub(r"(?m)^rich==.*$", "rich==13.0.0", lock.read_text()))
    proc = check(tree, "--installed")
    assert proc.returncode == 1
    assert f"this environment: rich: pinned 13.0.0, installed {installed}" in proc.stdout


def test_a_malformed_lock_is_a_one_line_usage_error(tree: Path) -> None:
    lock = tree / "locks" / "cuda.txt"
    lock.write_text(lock.read_text() + "torch>=2\n")
    proc = check(tree)
    assert proc.returncode == 2
    line = len(lock.read_text().splitlines())
    assert proc.stderr.strip().splitlines() == [
        f"lock: error: locks/cuda.txt:{line}: expected name==version, got 'torch>=2'"
    ]
    assert "Traceback" not in proc.stderr


def test_torch_is_the_same_release_everywhere_it_is_named() -> None:
    """pyproject, both locks, the runtime role and the lab's wheelhouse name one torch release."""
    from opsctl.lab.runtime import TORCH_REQUIREMENT

    cpu, cuda = pins(REPO / "locks" / "cpu.txt")["torch"], pins(REPO / "locks" / "cuda.txt")["torch"]
    assert cpu.endswith("+cpu") and "+" not in cuda
    release = cuda
    assert cpu == f"{release}+cpu"
    assert f'"torch=={release}"' in (REPO / "pyproject.toml").read_text()
    assert f"torch=={release}" == TORCH_REQUIREMENT
    role = yaml.safe_load((REPO / "roles" / "training_runtime" / "defaults" / "main.yml").read_text())
    assert role["training_runtime_requirements_defaults"]["torch"] == f"=={release}"
