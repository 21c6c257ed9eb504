"""The two sides of the monitoring contract, shared by the contract tests: what opsctl queries
(the Prometheus source's queries, the alert rules, the dashboards) and what the upstream exporters
publish (tests/fixtures/real-world, each artefact's source and tag in SOURCES.md)."""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from collections.abc import Container, Iterable
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


# --- DCGM: dcgm-exporter's fields (DCGM's dcgm_fields.h, go-dcgm's name table, dcgm-exporter's own
# collectors), extracted by scripts/extract_dcgm_fields.py into tests/fixtures/real-world.

# The DCGM releases the dcgm role supports: the pinned 3.x (inventory versions.yml), the first 4.x
# with field 1523 (4.5) and the one that renamed it (4.6); the role's version requirements split
# its rows nowhere else. Each maps to the dcgm-exporter release built for it (the validate play
# wants the exporter's version to start with the DCGM's), whose go.mod pins the go-dcgm that
# resolves the counters file's names; None: no dcgm-exporter release for that DCGM is in the
# snapshot, so go-dcgm's own first release for it (GO_DCGM_WITHOUT_EXPORTER) stands in.
DCGM_VERSIONS: dict[str, str | None] = {"3.3.9": "3.3.9-3.6.1", "4.5.3": "4.5.3-4.8.2", "4.6.0": None}
GO_DCGM_WITHOUT_EXPORTER = {"4.6.0": "v1.4601.0"}
EXPORTER_RELEASES = tuple(r for r in DCGM_VERSIONS.values() if r is not None)
_PROVENANCE = re.compile(r"^# (\S+) @ (\S+)(?: \(([0-9a-f]{40})\))? : (\S+)$")
_GO_DCGM_PIN = re.compile(r"^# go\.mod: github\.com/NVIDIA/go-dcgm v\S*-([0-9a-f]{12})$")


class FieldTable:
    """One fixture `NAME ID [TARGET|legacy]`: every name the artefact defines -> its field id."""

    def __init__(self, fixture: str) -> None:
        lines = (REAL_WORLD / fixture).read_text().splitlines()
        m = _PROVENANCE.match(lines[0])
        if not m:
            raise ValueError(f"{fixture}: no provenance line")
        self.fixture = fixture
        self.upstream, self.rev, self.path = m.group(1), m.group(2), m.group(4)
        self.commit = m.group(3) or m.group(2)
        self.ids: dict[str, int] = {}
        self.aliases: dict[str, str] = {}  # a header's `#define A B`: A -> B
        self.legacy: set[str] = set()  # names go-dcgm resolves through its legacy table only
        current: set[str] = set()
        for line in lines:
            if line.startswith("#") or not line.strip():
                continue
            name, ident, *rest = line.split()
            if self.ids.setdefault(name, int(ident)) != int(ident):
                raise ValueError(f"{fixture}: {name} has two ids")
            if rest == ["legacy"]:
                self.legacy.add(name)
            elif rest:
                self.aliases[name] = rest[0]
            else:
                current.add(name)
        self.legacy -= current

    def __contains__(self, name: object) -> bool:
        return name in self.ids

    def canonical(self, name: str) -> bool:
        """Defined under this name, not as another name's alias or a legacy spelling."""
        return name in self.ids and name not in self.aliases and name not in self.legacy


@functools.cache
def dcgm_table(version: str) -> FieldTable:
    """DCGM `version`'s own field names (dcgmlib/dcgm_fields.h at its tag), aliases included."""
    return FieldTable(f"dcgm_fields.DCGM-v{version}.txt")


@functools.cache
def exporter_names(release: str) -> frozenset[str]:
    """The DCGM_EXP_* names dcgm-exporter `release` declares for its own collectors."""
    text = (REAL_WORLD / f"dcgm-exporter.exporter-names.{release}.txt").read_text()
    return frozenset(x for x in text.splitlines() if x.startswith("DCGM_EXP_"))


def go_dcgm_pin(release: str) -> str:
    """The go-dcgm commit (12 hex digits) dcgm-exporter `release`'s go.mod pins."""
    text = (REAL_WORLD / f"dcgm-exporter.exporter-names.{release}.txt").read_text()
    (pin,) = [m.group(1) for x in text.splitlines() if (m := _GO_DCGM_PIN.match(x))]
    return pin


@functools.cache
def go_dcgm_table(version: str) -> FieldTable:
    """The names the dcgm-exporter built for DCGM `version` accepts in a counters file: the table of
    the go-dcgm its go.mod pins (GetFieldID: current names, then legacy ones)."""
    release = DCGM_VERSIONS[version]
    if release is None:
        return FieldTable(f"dcgm_fields.go-dcgm-{GO_DCGM_WITHOUT_EXPORTER[version]}.txt")
    pin = go_dcgm_pin(release)
    (table,) = [
        t
        for t in (FieldTable(p.name) for p in sorted(REAL_WORLD.glob("dcgm_fields.go-dcgm-*.txt")))
        if t.commit.startswith(pin)
    ]
    return table


def exporter_for(version: str) -> str:
    """The dcgm-exporter release whose own DCGM_EXP_* names count for DCGM `version` (the newest
    supported one where no release for that DCGM exists)."""
    return DCGM_VERSIONS[version] or EXPORTER_RELEASES[-1]


def default_counters(release: str) -> dict[str, bool]:
    """dcgm-exporter `release`'s etc/default-counters.csv: field -> enabled (False: commented out)."""
    text = (REAL_WORLD / f"dcgm-exporter.default-counters.names.{release}.txt").read_text()
    rows = [x.split() for x in text.splitlines() if x and not x.startswith("#")]
    return {name: state == "on" for name, state in rows}


def unknown_dcgm(
    names: dict[str, set[str]], known: Container[str], prefix: str = "DCGM_"
) -> dict[str, set[str]]:
    """The names among `names` that start with `prefix` and `known` lacks, with where they are used."""
    return {n: w for n, w in names.items() if n.startswith(prefix) and n not in known}


def conflicting_ids(names: Iterable[str], tables: Iterable[FieldTable]) -> dict[str, dict[str, int]]:
    """The names among `names` that two of `tables` give different field ids: name -> {fixture: id}."""
    tables = list(tables)
    out: dict[str, dict[str, int]] = {}
    for name in names:
        seen = {t.fixture: t.ids[name] for t in tables if name in t}
        if len(set(seen.values())) > 1:
            out[name] = seen
    return out


@functools.cache
def render_dcgm_counters_text(dcgm_version: str) -> str:
    """The dcgm role's counters file for `dcgm_version`: its template rendered with its defaults in
    process, with Ansible's own `version` test and regex filters. (The render through the real
    ansible-playbook, 3 s a version, is tests/unit/ansible/test_dcgm_counters.py's.)"""
    import jinja2
    from ansible.plugins.filter.core import regex_replace, regex_search
    from ansible.plugins.test.core import version_compare

    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.tests["version"] = version_compare
    env.filters["regex_replace"] = regex_replace
    env.filters["regex_search"] = regex_search
    defaults = yaml.safe_load((REPO / "roles/dcgm/defaults/main.yml").read_text())
    template = env.from_string((REPO / "roles/dcgm/templates/counters.csv.j2").read_text())
    return template.render({**defaults, "dcgm_version": dcgm_version, "ansible_managed": "Ansible managed"})


def render_dcgm_counters(dcgm_version: str) -> dict[str, str]:
    """The rendered counters file as dcgm-exporter reads it ('#' comments, trimmed fields): field -> type."""
    rows = csv.reader(io.StringIO(render_dcgm_counters_text(dcgm_version)))
    fields = [[c.strip() for c in r] for r in rows if r and not r[0].lstrip().startswith("#")]
    assert all(len(r) == 3 for r in fields), fields
    return {r[0]: r[1] for r in fields}
