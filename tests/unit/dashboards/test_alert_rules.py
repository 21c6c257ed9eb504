"""The alert rules load in promtool and behave as their promtool unit tests say; every alert has a
firing test, and every test input is shaped as the emulated exporters serve that series (the
shipped counters file's fields and labels, with the job and instance of the production scrape
config), or, for the remediation service's own metrics, as the service exports them."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from opsctl.hwsim.metrics import XID_COUNT, dcgm_families, load_collectors, node_families
from opsctl.hwsim.state import HCA_LAYOUTS, fabric_hcas, make_node
from opsctl.remediation.metrics import NS, RemediatorMetrics

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "dashboards" / "alerts"
SHIPPED = ROOT / "tests" / "golden" / "production" / "dcgm-counters.csv"
INVENTORY = ROOT / "inventory" / "production" / "hosts.yml"
REMEDIATION_JOB = "opsctl-remediation"  # roles/prometheus/defaults/main.yml prometheus_scrape_jobs
PROMTOOL = shutil.which("promtool")
_SERIES = re.compile(r"^(\w+)\{(.*)\}$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")


def _inputs() -> list[str]:
    return [
        series["series"]
        for path in sorted(ALERTS.glob("*.test.yml"))
        for test in yaml.safe_load(path.read_text())["tests"]
        for series in test.get("input_series", [])
    ]


def _emulated(name: str, labels: dict[str, str]) -> dict[str, str] | None:
    """The labels the emulator serves for this family on this node (and GPU, or port), as
    Prometheus stores them."""
    if name.startswith("DCGM_"):
        node = make_node(labels["instance"])
        # a series of a GPU with Slurm jobs comes once per job (the role's --hpc-job-mapping-dir)
        jobs = {int(labels["gpu"]): [labels["hpc_job"]]} if "hpc_job" in labels else None
        fams = {f.name: f for f in dcgm_families(node, load_collectors(SHIPPED), jobs=jobs)}
        if name not in fams:
            return None  # not a field of the shipped counters file
        for s in fams[name].samples:
            if s.labels["gpu"] == labels.get("gpu") and s.labels.get("hpc_job") == labels.get("hpc_job"):
                return s.labels | ({"xid": labels["xid"]} if name == XID_COUNT and "xid" in labels else {})
        return None
    served: list[dict[str, str]] = []
    for layout in HCA_LAYOUTS:  # a node of any layout, its fabric HCAs the site's ib_fabric_hcas
        for fam in node_families(make_node(labels["instance"], hca_layout=layout)):
            if fam.name == name:
                for s in fam.samples:
                    keys = ("device", "port", "mountpoint")
                    if all(labels.get(k) == v for k, v in s.labels.items() if k in keys):
                        served.append(s.labels | _fabric(name, s.labels, layout))
    wanted = labels | {"instance": labels.get("instance", "")}
    return next((s for s in served if s | {"instance": wanted["instance"]} == wanted), None) or (
        served[0] if served else None
    )


def _group_hosts(group: str) -> set[str]:
    """The hosts of a group of the production inventory, its child groups' included."""

    def groups(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, child in (node.get("children") or {}).items():
            yield name, child or {}
            yield from groups(child or {})

    members: dict[str, set[str]] = {}  # a group listed again as a child adds no hosts of its own
    children: dict[str, set[str]] = {}
    for name, entry in groups(yaml.safe_load(INVENTORY.read_text())["all"]):
        members.setdefault(name, set()).update(entry.get("hosts") or {})
        children.setdefault(name, set()).update(entry.get("children") or {})

    def hosts(name: str) -> set[str]:
        return members.get(name, set()).union(*(hosts(c) for c in children.get(name, set())))

    return hosts(group)


def _remediator_served() -> dict[str, set[str]]:
    """The remediation service's samples before its first pass: name -> label names (families
    with labels show none yet; the rules query only those without)."""
    text = generate_latest(RemediatorMetrics().registry).decode()
    return {s.name: set(s.labels) for fam in text_string_to_metric_families(text) for s in fam.samples}


def _fabric(name: str, labels: dict[str, str], layout: str) -> dict[str, str]:
    """The label the prometheus role's relabelling adds (tests/unit/ansible/test_monitoring_roles.py
    applies the rendered rule): the fabric's InfiniBand families only."""
    if name.startswith("node_infiniband_") and labels.get("device") in fabric_hcas(layout):
        return {"fabric": "infiniband"}
    return {}


@pytest.mark.parametrize("series", _inputs())
def test_inputs_are_shaped_as_the_emulator_serves_them(series: str) -> None:
    m = _SERIES.match(series)
    assert m, series
    name, labels = m.group(1), dict(_LABEL.findall(m.group(2)))
    job = labels.pop("job", None)
    if name == "up":
        assert set(labels) == {"instance"} and job in {"dcgm-exporter", "node", REMEDIATION_JOB}, series
        if job == REMEDIATION_JOB:
            assert labels["instance"] in _group_hosts("remediation"), series
        return
    if name.startswith(f"{NS}_"):
        # the service's own metrics, scraped by its job from a host of the remediation group
        assert job == REMEDIATION_JOB and labels.pop("instance") in _group_hosts("remediation"), series
        served = _remediator_served()
        assert name in served, f"the remediation service exports no such series: {series}"
        assert set(labels) == served[name], series
        return
    assert job == ("dcgm-exporter" if name.startswith("DCGM_") else "node"), series
    want = _emulated(name, labels)
    assert want is not None, f"the emulator serves no such series with the shipped config: {series}"
    assert labels == want | {"instance": labels["instance"]}, series
    if name.startswith("DCGM_"):
        assert labels["Hostname"] == labels["instance"], series  # the node, as production names it


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=ALERTS, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("rules", sorted(p.name for p in ALERTS.glob("*.rules.yml")))
def test_rules_pass_promtool_check(rules: str) -> None:
    result = _promtool("check", "rules", rules)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("tests", sorted(p.name for p in ALERTS.glob("*.test.yml")))
def test_rules_unit_tests(tests: str) -> None:
    result = _promtool("test", "rules", tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_or_severity() -> None:
    alerts = {
        rule["alert"]: rule
        for path in ALERTS.glob("*.rules.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    tested = {
        case["alertname"]
        for path in ALERTS.glob("*.test.yml")
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    untested = sorted(set(alerts) - tested)
    assert not untested, f"alerts without a firing unit test: {untested}"
    for name, rule in alerts.items():
        # page: the alertmanager role's route to a person now (the remediation service's dead-man);
        # anything else, critical and warning included, goes to the ticket receiver
        assert rule["labels"]["severity"] in {"page", "critical", "warning"}, name
        assert rule["annotations"]["summary"], name
