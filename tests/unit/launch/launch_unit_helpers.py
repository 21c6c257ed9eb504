"""Builders for launch unit tests: partition nodes, paths of the demo config and golden files."""

from __future__ import annotations

from pathlib import Path

from opsctl.model import Node

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
GOLDEN = ROOT / "tests" / "golden" / "launch"


def partition(count: int, name: str = "gpu") -> list[Node]:
    return [Node(f"gpu-{i:03d}", "idle", partitions=[name], gpus_total=8, gpu_type="h200")
            for i in range(1, count + 1)]
