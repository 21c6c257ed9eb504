"""`opsctl health` lists nodes in node-set order (ClusterShell's natural order: node2 before
node10), in the table, in --json, in its remediation decisions and in --coverage, whatever order
Slurm or the source gave them in."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import pytest

from opsctl.checks.coverage import coverage, render_text
from opsctl.checks.settings import HealthSection
from opsctl.evidence.model import Evidence, XidEvent
from opsctl.health import service
from opsctl.health.render import render

NOW = 1_700_000_000.0
NATURAL = [f"node{i}" for i in range(1, 13)]  # node1, node2, ..., node9, node10, node11, node12
LEXICAL = sorted(NATURAL)  # node1, node10, node11, node12, node2, ...


@dataclass
class _Node:
    name: str
    state: str = "idle"
    reason: str = ""
    flags: set[str] = field(default_factory=set)
    partitions: list[str] = field(default_factory=lambda: ["gpu"])

    @property
    def drain_flag(self) -> bool:
        return "DRAIN" in self.flags


class _Slurm:
    """Slurm's node list in no particular order."""

    def __init__(self) -> None:
        names = list(NATURAL)
        random.Random(7).shuffle(names)
        self._nodes = [_Node(n) for n in names]

    def nodes(self, names):
        return [n for n in self._nodes if names is None or n.name in names]

    def drain(self, names, reason):  # pragma: no cover - dry runs only
        raise AssertionError("dry run drained")

    def resume(self, names):  # pragma: no cover
        raise AssertionError("dry run resumed")


class _Source:
    """XID 79 on node2 and node10; node3 and node11 report no XIDs; evidence in reverse order."""

    name = "fake"

    def collect(self, nodes, now):
        out = []
        for n in reversed(nodes):
            blind = n in ("node3", "node11")
            provides = frozenset({"gpu_count"} if blind else {"gpu_count", "xid"})
            ev = Evidence(n, "fake", now, gpu_count=8, provides=provides, boot_id="b1",
                          xid_mode="" if blind else "count")
            ev.xids = None if blind else ([XidEvent(79, gpu=3, time=now)] if n in ("node2", "node10") else [])
            out.append(ev)
        return out


@pytest.fixture
def ctx(tmp_path) -> service.HealthContext:
    h = HealthSection(state_file=str(tmp_path / "state.json"), decision_log=str(tmp_path / "d.jsonl"),
                      expected_gpus=8, required_checks=["gpu-count"], max_fraction=1.0)
    return service.HealthContext(health=h, slurm=_Slurm(), config=None)  # type: ignore[arg-type]


def table_nodes(text: str) -> list[str]:
    """The node column of a rendered table, top to bottom."""
    return [m.group(1) for line in text.splitlines() if (m := re.match(r"\W*(node\d+)\b", line))]


def test_every_node_slurm_knows_is_listed_in_node_set_order(ctx) -> None:
    assert service.resolve_nodes(ctx, None) == NATURAL
    assert service.resolve_nodes(ctx, "node[1-12]") == NATURAL


def test_table_and_json_list_nodes_in_node_set_order(ctx, capsys) -> None:
    result = service.run_health(ctx, LEXICAL, _Source(), now=NOW)
    assert [n["node"] for n in result.to_json()["nodes"]] == NATURAL
    render(result, show_all=True)
    assert table_nodes(capsys.readouterr().out) == NATURAL


def test_remediation_decisions_are_listed_in_node_set_order(ctx, capsys) -> None:
    result = service.run_health(ctx, LEXICAL, _Source(), remediate=True, dry_run=True, now=NOW)
    per_node = [d.node for d in result.decisions if d.action != "alert"]
    assert per_node == [n for n in NATURAL if n in per_node] and len(per_node) >= 2
    drains = [d.node for d in result.decisions if d.action == "drain"]
    assert drains == ["node2", "node10"]
    json_drains = [d["node"] for d in result.to_json()["remediation"]["decisions"] if d["action"] == "drain"]
    assert json_drains == ["node2", "node10"]
    render(result)
    out = capsys.readouterr().out
    assert re.findall(r"drain\s+(node\d+):", out) == ["node2", "node10"]


def test_coverage_lists_nodes_in_node_set_order(ctx) -> None:
    cov = coverage(_Source().collect(LEXICAL, NOW), ["gpu-xid"])
    assert cov.nodes == NATURAL
    (xid,) = [c for c in cov.checks if c.code == "gpu-xid"]
    assert xid.lacking == ["node3", "node11"]
    assert cov.xid_modes["count"] == [n for n in NATURAL if n not in ("node3", "node11")]
    assert list(cov.nodes_lacking_required) == ["node3", "node11"]
    assert "lacking: node3, node11" in render_text(cov, "fake")
