from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.hwsim.state import NodeHardware, make_node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"
NOW = 1_796_000_000.0  # a fixed "now" (Dec 2026) so boot times and stamps are reproducible


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def node() -> NodeHardware:
    return make_node("gpu-007", now=NOW)
