"""Every node_exporter series opsctl reads, the alert rules query and the dashboards draw exists,
with the labels read, in what node_exporter publishes for each version the roles install (Debian
12's 1.5.0, Debian 13's 1.9.0): its end-to-end test output and the names its infiniband and
filesystem collectors declare (tests/fixtures/real-world, SOURCES.md). The simulator's node
families are held to the same artefacts, never to the product's own list."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsctl.evidence import prometheus as source
from opsctl.hwsim.metrics import node_families
from opsctl.hwsim.state import make_node

REPO = Path(__file__).resolve().parents[3]
REAL_WORLD = REPO / "tests" / "fixtures" / "real-world"
VERSIONS = {"v1.5.0": "Debian 12", "v1.9.0": "Debian 13"}
NAME = re.compile(r"\bnode_[a-z0-9_]+\b")
SAMPLE = re.compile(r"^(node_[a-z0-9_]+)(?:\{(.*)\})? ")

Published = dict[str, frozenset[str]]  # metric name -> its label names


def published(version: str) -> Published:
    out: dict[str, set[str]] = {}
    for line in (REAL_WORLD / f"node_exporter.e2e-output.ib-stat-nfs.{version}.txt").read_text().splitlines():
        if line.startswith("# HELP "):
            out.setdefault(line.split()[2], set())
        elif m := SAMPLE.match(line):
            labels = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(2) or "")
            out.setdefault(m.group(1), set()).update(labels)
    for line in (REAL_WORLD / f"node_exporter.collector-names.{version}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, labels = line.split()
            out.setdefault(name, set()).update(labels.split(","))
    return {k: frozenset(v) for k, v in out.items()}


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


def queried() -> dict[str, str]:
    """node_exporter names -> where opsctl reads them (the first place found)."""
    out: dict[str, str] = {}
    for name in (*source.GAUGES, *source.COUNTERS):
        if name.startswith("node_"):
            out.setdefault(name, "opsctl/evidence/prometheus.py")
    for path in sorted((REPO / "dashboards" / "alerts").glob("*.rules.yml")):
        for expr in _exprs(yaml.safe_load(path.read_text())):
            for name in NAME.findall(expr):
                out.setdefault(name, str(path.relative_to(REPO)))
    for path in sorted((REPO / "dashboards" / "grafana").glob("*.json")):
        for expr in _exprs(json.loads(path.read_text())):
            for name in NAME.findall(expr):
                out.setdefault(name, str(path.relative_to(REPO)))
    return out


def missing(names: dict[str, str], available: Published) -> list[str]:
    return sorted(f"{name} ({where})" for name, where in names.items() if name not in available)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_every_name_opsctl_queries_is_published(version):
    names = queried()
    assert len(names) >= 15  # the sources, rules and dashboards were all read
    assert missing(names, published(version)) == [], f"node_exporter {version} ({VERSIONS[version]})"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_infiniband_series_carry_the_device_and_port_opsctl_reads(version):
    available = published(version)
    for name in queried():
        if name.startswith("node_infiniband_"):
            assert {"device", "port"} <= available.get(name, frozenset()), name


def test_a_wrong_name_is_caught():
    # the contract has teeth: one product name spelled as the product once spelled it
    names = dict(queried())
    names["node_infiniband_port_transmit_discards_total"] = "a mutated query"
    assert missing(names, published("v1.5.0")) == [
        "node_infiniband_port_transmit_discards_total (a mutated query)"
    ]


def test_the_simulators_node_families_are_published_with_their_labels():
    # the simulator serves node_exporter 1.5 (the Debian 12 lab); every family and label it
    # serves must exist there, so a test can never pass on a name the real exporter lacks
    available = published("v1.5.0")
    for fam in node_families(make_node("gpu-001"), now=1_700_000_000.0):
        assert fam.name in available, fam.name
        for sample in fam.samples:
            assert set(sample.labels) <= available[fam.name], (fam.name, sample.labels)


def test_the_prometheus_test_fixtures_serve_published_names():
    # tests/integration/health/promlab.py serves node_infiniband_<counter>_total for its counters
    tree = ast.parse((REPO / "tests" / "integration" / "health" / "promlab.py").read_text())
    (counters,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "IB_COUNTERS" for t in n.targets)
    ]
    available = published("v1.5.0")
    assert [c for c in counters if f"node_infiniband_{c}_total" not in available] == []
