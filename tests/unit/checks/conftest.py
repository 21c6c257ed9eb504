from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.checks.thresholds import Thresholds, load_thresholds

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"


def _read(name: str) -> str:
    return (REAL_WORLD / name).read_text(encoding="utf-8")


@pytest.fixture
def real():  # type: ignore[no-untyped-def]
    return _read


@pytest.fixture
def th() -> Thresholds:
    return load_thresholds()
