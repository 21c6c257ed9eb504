"""Fixtures of the remediation service tests: an 8-node simulated cluster with monitoring (real
slurmctld/slurmd, emulated exporters scraped by a real Prometheus) and a real Alertmanager."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# amlab.py sits next to this file; make it importable without a package
sys.path.insert(0, str(Path(__file__).parent))

from amlab import running_alertmanager

from opsctl.sim.cluster import SimCluster

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "prometheus", "prometheus-alertmanager")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="rmd", dir="/tmp"))
    cluster = SimCluster(nodes=8, state_dir=state_dir, addons=["monitoring"])
    try:
        cluster.up()
        yield cluster
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("prometheus-alertmanager") is None:
        pytest.fail("needs prometheus-alertmanager (scripts/bootstrap.sh installs it)", pytrace=False)
    with running_alertmanager(tmp_path_factory.mktemp("alertmanager")) as url:
        yield url
