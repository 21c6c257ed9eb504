"""The launch health gate on the simulated cluster with its monitoring (emulated DCGM/node
exporters scraped by a real Prometheus): a node with an injected XID is left out of the launch,
and a launch that needs it is refused with the reason."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_sim_helpers import DEMO, ROOT, launch_toml

from opsctl.sim import monitoring
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def monitored() -> Iterator[tuple[SimCluster, Path]]:
    if shutil.which("prometheus") is None:
        pytest.fail("the health gate test needs prometheus (scripts/bootstrap.sh)", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="lgate", dir="/tmp"))  # munge's socket path must stay short
    sim = SimCluster(nodes=4, state_dir=root / "s", addons=["monitoring"])
    try:
        sim.up()
        config = root / "opsctl.toml"
        section = launch_toml(root).replace('health_source = "none"', 'health_source = "prometheus"')
        config.write_text(sim.config_path.read_text() + section)
        yield sim, config
    finally:
        sim.down()
        shutil.rmtree(root, ignore_errors=True)


def dry_run(sim: SimCluster, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**sim.env, "OPSCTL_CONFIG": str(config)}
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--config", str(DEMO), "--dry-run", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)


def test_unhealthy_node_is_excluded_or_the_launch_refused(monitored: tuple[SimCluster, Path]) -> None:
    sim, config = monitored
    monitoring.inject(sim, "gpu-002", "xid=79,gpu=3")
    deadline = time.monotonic() + 90  # Prometheus scrapes every few seconds
    out = dry_run(sim, config, "--nodes", "3")
    while "gpu-002 (unhealthy" not in out.stdout and time.monotonic() < deadline:
        time.sleep(2)
        out = dry_run(sim, config, "--nodes", "3")
    assert out.returncode == 0, out.stderr
    assert "gpu-002 (unhealthy: FAIL gpu-xid" in out.stdout
    assert "#SBATCH --exclude=gpu-002\n" in out.stdout
    refused = dry_run(sim, config, "--nodes", "4")
    assert refused.returncode == 2
    assert refused.stderr.startswith("opsctl: error: refusing to launch: 4 nodes needed, 3 of 4")
    assert "gpu-002 (unhealthy: FAIL gpu-xid" in refused.stderr
