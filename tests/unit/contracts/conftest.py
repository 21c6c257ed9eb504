from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"


@pytest.fixture
def real() -> Callable[[str], str]:
    return lambda name: (REAL_WORLD / name).read_text(encoding="utf-8")
