from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opsctl.sim.cluster import SimCluster

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "prometheus")


def _skip_without_daemons() -> None:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/bootstrap.sh installs them)")


@pytest.fixture
def make_sim() -> Iterator[Callable[[int], SimCluster]]:
    """Start a simulated cluster with monitoring; always stopped, even when the test fails."""
    _skip_without_daemons()
    started: list[tuple[SimCluster, Path]] = []

    def make(nodes: int) -> SimCluster:
        # A short path: munge's socket lives inside and unix socket paths are limited to 107 bytes.
        state_dir = Path(tempfile.mkdtemp(prefix="hwsim", dir="/tmp"))
        sim = SimCluster(nodes=nodes, state_dir=state_dir, addons=["monitoring"])
        started.append((sim, state_dir))
        return sim.up()

    yield make
    for sim, state_dir in started:
        try:
            sim.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
