"""Fixtures for launch unit tests."""

from __future__ import annotations

import pytest

from opsctl.launch.settings import LaunchSection


@pytest.fixture
def production() -> LaunchSection:
    """The production defaults, with fixed paths so rendered scripts are stable."""
    return LaunchSection(runs_dir="/shared/runs", python="/opt/opsctl/venv/bin/python",
                         workdir="/shared/opsctl")
