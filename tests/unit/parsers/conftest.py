from __future__ import annotations

from pathlib import Path

import pytest

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"


@pytest.fixture
def real() -> Reader:
    return Reader()


class Reader:
    def __call__(self, name: str) -> str:
        return (REAL_WORLD / name).read_text(encoding="utf-8")
