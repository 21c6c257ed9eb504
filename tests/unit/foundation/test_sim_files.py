"""Parts of the simulated cluster that need no daemons: names, config writing, safe teardown."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.config import load_config
from opsctl.errors import UsageError
from opsctl.sim.cluster import SimCluster, free_ports


def test_node_names_and_limits(tmp_path: Path) -> None:
    assert SimCluster(nodes=4, state_dir=tmp_path).node_names == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert SimCluster(nodes=64, state_dir=tmp_path).node_names[-1] == "gpu-064"
    with pytest.raises(UsageError):
        SimCluster(nodes=0, state_dir=tmp_path)


def test_set_config_round_trips_through_the_loader(tmp_path: Path) -> None:
    sim = SimCluster(state_dir=tmp_path)
    sim.set_config("slurm", backend="cli", partition="gpu", command_timeout=60)
    sim.set_config("prometheus", url='http://127.0.0.1:9090/"quoted"')
    sim.set_config("slurm", partition="batch")  # later calls update, earlier keys stay
    config = load_config(sim.config_path)
    assert (config.slurm.backend, config.slurm.partition) == ("cli", "batch")
    assert config.slurm.command_timeout == 60.0
    assert config.prometheus.url == 'http://127.0.0.1:9090/"quoted"'


def test_down_on_a_directory_that_is_not_a_sim_touches_nothing(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    sim = SimCluster(state_dir=tmp_path)
    sim.down()
    sim.down()
    assert (tmp_path / "keep.txt").read_text() == "x"
    assert not sim.running() and sim.status().processes == []


def test_free_ports_are_distinct() -> None:
    ports = free_ports(65)
    assert len(set(ports)) == 65 and all(1024 <= p <= 65535 for p in ports)
