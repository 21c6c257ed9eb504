"""Fixtures for the provisioning tests."""

from __future__ import annotations

from types import ModuleType

import pytest
from provisioning_helpers import load_library_module


@pytest.fixture(scope="session")
def hw_facts_module() -> ModuleType:
    return load_library_module("hw_facts")


@pytest.fixture(scope="session")
def cgroup_module() -> ModuleType:
    return load_library_module("cgroup_v2_check")
