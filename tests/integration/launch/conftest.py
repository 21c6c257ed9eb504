"""The module-scoped simulated cluster for launch/watch integration tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_sim_helpers import LaunchEnv, LaunchSim, launch_toml


@pytest.fixture(scope="module")
def launch_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchEnv]:
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        if not any((Path(p) / tool).exists() for p in os.environ.get("PATH", "").split(":")):
            pytest.fail(f"launch integration tests need Slurm and munge ({tool} missing)", pytrace=False)
    root = tmp_path_factory.mktemp("lsim")
    sim = LaunchSim(nodes=4, state_dir=root / "s", slurmd_timeout=10)
    try:
        sim.up()
        config = root / "opsctl.toml"
        config.write_text(sim.config_path.read_text() + launch_toml(root))
        yield LaunchEnv(sim, root, config)
    finally:
        sim.down()
