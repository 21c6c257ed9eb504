"""Shared by every test: how to run the real `opsctl` binary.

Area fixtures live in each area's own conftest.py; the simulated-cluster fixtures (`sim4`,
`sim_factory`) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _opsctl_bin() -> str:
    # Prefer the entry point next to the interpreter running the tests (the venv's), then PATH.
    candidate = Path(sys.executable).parent / "opsctl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("opsctl")
    if found is None:
        raise RuntimeError("the opsctl entry point is not installed (run scripts/bootstrap.sh)")
    return found


@pytest.fixture(scope="session")
def opsctl_bin() -> str:
    return _opsctl_bin()


RunOpsctl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def run_opsctl(opsctl_bin: str) -> RunOpsctl:
    """Run the real `opsctl` binary: run_opsctl("nodes", "--json", env={...})."""

    def run(
        *args: str, env: Mapping[str, str] | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        full_env.pop("OPSCTL_CONFIG", None)  # tests say which cluster they mean
        full_env.update(env or {})
        return subprocess.run([opsctl_bin, *args], capture_output=True, text=True, env=full_env,
                              timeout=timeout, check=False)

    return run


def pytest_collection_finish(session: pytest.Session) -> None:
    # The hw_facts unit tests load Ansible modules in-process, and importing
    # ansible.module_utils replaces sys.intern with a patch object; torch._dynamo, imported lazily
    # by the training tests, then refuses to register its substitute for sys.intern. Importing
    # dynamo before any test runs (only when the collected tests already imported torch) makes the
    # outcome independent of test order.
    if "torch" in sys.modules:
        import torch._dynamo  # noqa: F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist (`--dist loadgroup`, as `make test` runs): a module's tests run on
    one worker, so its module-scoped clusters and renders are built once; every lab module on the
    same worker, one after another, since labs share the bridge and its addresses."""
    for item in items:
        try:
            rel = item.path.relative_to(REPO_ROOT)
        except ValueError:
            continue
        group = "lab" if rel.parts[:3] == ("tests", "integration", "lab") else rel.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
