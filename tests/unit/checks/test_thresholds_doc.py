"""docs/health-checks.md shows each threshold's default in brackets after its key (`ecc.dbe_volatile_max`
[0]); every such default must be what opsctl/checks/thresholds.toml ships, so the page cannot drift
from the file the checks read."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "health-checks.md"
SHIPPED = tomllib.loads((REPO / "opsctl" / "checks" / "thresholds.toml").read_text(encoding="utf-8"))
_SHOWN = re.compile(r"`\[?(?P<key>[a-z_]+(?:\.[a-z_]+)*)\]?` \[(?P<value>[^\]]+)\]")


def _lookup(key: str) -> Any:
    """A dotted key, or a bare one that exactly one section of the file has."""
    if "." in key:
        node: Any = SHIPPED
        for part in key.split("."):
            node = node[part]
        return node
    (value,) = [table[key] for table in SHIPPED.values() if isinstance(table, dict) and key in table]
    return value


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value in ({}, []):
        return "empty"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_default_the_page_shows_is_the_shipped_one() -> None:
    shown = [(m.group("key"), m.group("value")) for m in _SHOWN.finditer(DOC.read_text(encoding="utf-8"))]
    assert len(shown) >= 15, shown
    wrong = [f"{key}: page [{value}], thresholds.toml [{_shown(_lookup(key))}]"
             for key, value in shown if _shown(_lookup(key)) != value.split(":")[0]]  # "[empty: why]"
    assert not wrong, "\n".join(wrong)
