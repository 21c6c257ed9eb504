"""Shared builders for launch unit tests: partition nodes and the production [launch] settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.launch.settings import LaunchSection
from opsctl.model import Node

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
GOLDEN = ROOT / "tests" / "golden" / "launch"


def partition(count: int, name: str = "gpu") -> list[Node]:
    return [Node(f"gpu-{i:03d}", "idle", partitions=[name], gpus_total=8, gpu_type="h200")
            for i in range(1, count + 1)]


@pytest.fixture
def production() -> LaunchSection:
    """The production defaults, with fixed paths so rendered scripts are stable."""
    return LaunchSection(runs_dir="/shared/runs", python="/opt/opsctl/venv/bin/python",
                         workdir="/shared/opsctl")
