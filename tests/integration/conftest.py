"""Simulated-cluster fixtures for integration tests (real munged, slurmctld, slurmd).

- `sim4`: one 4-node cluster for the whole session. Tests that drain nodes or submit jobs must
  leave it as they found it; call `sim4.reset()` (cancel jobs, resume nodes, wait idle) when done.
- `sim_factory(nodes=N, **kwargs)`: a cluster of another size (or with add-ons) for one test
  session; stopped at the end of the session even when tests fail.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from diagnostics import reports

from opsctl.sim.cluster import SimCluster

SimFactory = Callable[..., SimCluster]


def _require_slurm() -> None:
    missing = [t for t in ("munged", "slurmctld", "slurmd", "sinfo") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"integration tests need Slurm and munge installed (missing {missing}); "
                    "run scripts/bootstrap.sh", pytrace=False)


@pytest.fixture(scope="session")
def sim_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFactory]:
    started: list[SimCluster] = []

    def make(nodes: int = 4, **kwargs: Any) -> SimCluster:
        _require_slurm()
        # Short base: munge's unix socket path must stay under 108 bytes.
        state_dir = tmp_path_factory.mktemp(f"sim{nodes}-")
        cluster = SimCluster(nodes=nodes, state_dir=state_dir, **kwargs)
        started.append(cluster)
        cluster.up()
        return cluster

    make.started = started  # type: ignore[attr-defined]  # the failure report's diagnostics read them
    try:
        yield make
    finally:
        for cluster in reversed(started):
            cluster.down()


@pytest.fixture(scope="session")
def sim4(sim_factory: SimFactory) -> SimCluster:
    return sim_factory(nodes=4)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with what explains it: the daemons of every simulated cluster
    and the failed units of every lab among its fixtures (diagnostics.py)."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and report.when in ("setup", "call"):
        for title, text in reports(getattr(item, "funcargs", {}).values()):
            report.sections.append((title, text))
