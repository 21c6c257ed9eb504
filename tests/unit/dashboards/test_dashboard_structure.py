"""Grafana has no Debian package, so dashboards are checked for structure here and their queries
are run against a real Prometheus in tests/integration/dashboards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GRAFANA = Path(__file__).resolve().parents[3] / "dashboards" / "grafana"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))


def test_there_are_dashboards() -> None:
    assert DASHBOARDS


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    dash = json.loads(path.read_text())
    assert dash["uid"].startswith("opsctl-") and dash["title"]
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert "datasource" in variables
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        xs = range(pos["x"], pos["x"] + pos["w"])
        mine = {(x, y) for x in xs for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not (cells & mine), f"panel {panel['title']!r} overlaps another"
        cells |= mine
