"""Every node_exporter series opsctl reads, the alert rules query and the dashboards draw exists,
with the labels read, in what node_exporter publishes for each version the roles install
(upstream_contract.NODE_EXPORTER_VERSIONS). The simulator's node families and the Prometheus test
fixture's are held to the same artefacts, never to the product's own list."""

from __future__ import annotations

import ast

import pytest
from upstream_contract import NODE_EXPORTER_VERSIONS, REPO, node_exporter_published, queried, unpublished

from opsctl.hwsim.metrics import BOOT_ID_METRIC, node_families
from opsctl.hwsim.state import make_node

ROLE_TEXTFILES = {BOOT_ID_METRIC}  # written by roles/node_exporter for the textfile collector


@pytest.mark.parametrize("version", sorted(NODE_EXPORTER_VERSIONS))
def test_every_node_exporter_name_opsctl_queries_is_published(version):
    names = queried()
    assert sum(n.startswith("node_") for n in names) >= 15  # source, rules and dashboards were read
    missing = unpublished(names, node_exporter_published(version))
    assert missing == {}, f"not in node_exporter {version} ({NODE_EXPORTER_VERSIONS[version]}): {missing}"


@pytest.mark.parametrize("version", sorted(NODE_EXPORTER_VERSIONS))
def test_infiniband_series_carry_the_device_and_port_opsctl_reads(version):
    available = node_exporter_published(version)
    for name in queried():
        if name.startswith("node_infiniband_"):
            assert {"device", "port"} <= available.get(name, frozenset()), name


def test_a_wrong_name_is_caught():
    # the contract has teeth: one name spelled as the product once spelled it
    names = queried()
    names["node_infiniband_port_transmit_discards_total"] = {"a mutated query"}
    missing = unpublished(names, node_exporter_published("v1.5.0"))
    assert missing == {"node_infiniband_port_transmit_discards_total": {"a mutated query"}}


def test_the_simulators_node_families_are_published_with_their_labels():
    # the simulator serves node_exporter 1.5 (the Debian 12 lab); every family and label it
    # serves must exist there, so a test can never pass on a name the real exporter lacks.
    # The textfile collector's families are the role's own files, in our namespace, not
    # node_exporter's: tests/unit/ansible/test_node_exporter_role.py holds the simulator's to the
    # role's script instead.
    available = node_exporter_published("v1.5.0")
    for fam in node_families(make_node("gpu-001"), now=1_700_000_000.0):
        if fam.name in ROLE_TEXTFILES:
            assert fam.name not in available and fam.name.startswith("opsctl_"), fam.name
            continue
        assert fam.name in available, fam.name
        for sample in fam.samples:
            assert set(sample.labels) <= available[fam.name], (fam.name, sample.labels)


def test_the_prometheus_test_fixture_serves_published_names():
    # tests/integration/health/promlab.py serves node_infiniband_<counter>_total for its counters
    tree = ast.parse((REPO / "tests" / "integration" / "health" / "promlab.py").read_text())
    (counters,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "IB_COUNTERS" for t in n.targets)
    ]
    available = node_exporter_published("v1.5.0")
    assert [c for c in counters if f"node_infiniband_{c}_total" not in available] == []
