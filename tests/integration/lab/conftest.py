"""One lab per test module (head + GPU machines), booted once, taken down even on failure.

A module that needs another machine count overrides the `lab` fixture with `boot_lab(..., nodes)`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from lab_helpers import GPU_NODES, Converged, RunningLab

from opsctl.lab.config import from_env


def _can_run_lab() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    for tool in ("systemd-nspawn", "debootstrap", "ip", "ssh", "munged"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/bootstrap.sh installs it)"
    return None


def boot_lab(tmp_path_factory: pytest.TempPathFactory, nodes: int, *up_args: str) -> Iterator[RunningLab]:
    reason = _can_run_lab()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("lab")
    env = dict(os.environ)
    env["OPSCTL_LAB_STATE"] = str(root / "state")
    env["OPSCTL_LAB_INVENTORY"] = str(root / "inventory")
    # The image cache is shared on purpose: it is built once per machine, outside the work tree.
    os.environ["OPSCTL_LAB_STATE"] = env["OPSCTL_LAB_STATE"]
    try:
        cfg = from_env(nodes)
    finally:
        del os.environ["OPSCTL_LAB_STATE"]
    running = RunningLab(cfg, root / "inventory", env)
    try:
        running.opsctl("up", "--nodes", str(nodes), "--json", *up_args, timeout=1800)
        yield running
    finally:
        # Keep the machines' console logs (pytest keeps its recent temp dirs) for post-mortems.
        for log in (cfg.state_dir / "machines").glob("*/console.log"):
            shutil.copy2(log, root / f"console-{log.parent.name}.log")
        running.opsctl("down", check=False, timeout=300)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningLab]:
    yield from boot_lab(tmp_path_factory, GPU_NODES)


@pytest.fixture(scope="module")
def converged(lab: RunningLab) -> Converged:
    from opsctl.lab.converge import run_playbook
    from opsctl.lab.lab import REPO_ROOT

    first = run_playbook(REPO_ROOT, lab.inventory)
    second = run_playbook(REPO_ROOT, lab.inventory) if not first.failed_hosts else first
    return Converged(first, second)
