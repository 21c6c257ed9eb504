"""The two sides of the monitoring contract, shared by the contract tests: what opsctl queries
(the Prometheus source's queries, the alert rules, the dashboards) and what the upstream exporters
publish (tests/fixtures/real-world, each artefact's source and tag in SOURCES.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from opsctl.evidence.prometheus import PrometheusSource

REPO = Path(__file__).resolve().parents[3]
REAL_WORLD = REPO / "tests" / "fixtures" / "real-world"
METRIC = re.compile(r"\b(DCGM_[A-Z0-9_]+|node_[a-z0-9_]+)\b")
# node_exporter releases the roles install: Debian's package on each supported release
NODE_EXPORTER_VERSIONS = {"v1.5.0": "Debian 12", "v1.9.0": "Debian 13"}
_SAMPLE = re.compile(r"^(node_[a-z0-9_]+)(?:\{(.*)\})? ")

Published = dict[str, frozenset[str]]  # metric name -> its label names


def queried() -> dict[str, set[str]]:
    """Every metric name opsctl queries -> where."""
    out: dict[str, set[str]] = {}

    def add(text: str, where: str) -> None:
        for name in METRIC.findall(text):
            out.setdefault(name, set()).add(where)

    for q in PrometheusSource("http://x").queries().values():
        add(q, "opsctl prometheus source")
    for path in sorted((REPO / "dashboards/alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                add(rule["expr"], path.name)
    for path in sorted((REPO / "dashboards/grafana").glob("*.json")):
        for panel in json.loads(path.read_text()).get("panels", []):
            for target in panel.get("targets", []):
                add(target.get("expr", ""), path.name)
    return out


def node_exporter_published(version: str) -> Published:
    """Names and label names node_exporter `version` can serve for the families opsctl reads: its
    end-to-end output plus what its infiniband and filesystem collectors declare."""
    out: dict[str, set[str]] = {}
    e2e = REAL_WORLD / f"node_exporter.e2e-output.ib-stat-nfs.{version}.txt"
    for line in e2e.read_text().splitlines():
        if line.startswith("# HELP "):
            out.setdefault(line.split()[2], set())
        elif m := _SAMPLE.match(line):
            out.setdefault(m.group(1), set()).update(re.findall(r'([a-zA-Z_]\w*)="', m.group(2) or ""))
    for line in (REAL_WORLD / f"node_exporter.collector-names.{version}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, labels = line.split()
            out.setdefault(name, set()).update(labels.split(","))
    return {k: frozenset(v) for k, v in out.items()}


def unpublished(names: dict[str, set[str]], available: Published) -> dict[str, set[str]]:
    """The node_exporter names among `names` that `available` lacks, with where they are queried."""
    return {n: w for n, w in names.items() if n.startswith("node_") and n not in available}
