"""Evidence coverage: which checks a source's evidence can evaluate, on which nodes."""

from __future__ import annotations

import pytest

from opsctl.checks.catalogue import CATALOGUE
from opsctl.checks.coverage import coverage, has_fact, render_text
from opsctl.checks.settings import REQUIRED_CHECKS, HealthSection
from opsctl.evidence.model import Evidence, GpuEvidence, IbPortEvidence, XidEvent

NOW = 1_796_000_000.0
PROM = frozenset({"gpu_count", "xid", "ecc", "row_remap", "pcie", "ib", "ib_errors"})
REQUIRED = list(REQUIRED_CHECKS)


def node(name: str, **kw: object) -> Evidence:
    ev = Evidence(
        name,
        "prometheus",
        NOW,
        gpu_count=2,
        gpus=[
            GpuEvidence(
                i, ecc_dbe_volatile=0, remap_pending=False, remap_failure=False, pcie_gen=5, pcie_width=16
            )
            for i in range(2)
        ],
        xids=[],
        xid_mode="count",
        ib_ports=[IbPortEvidence("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, counter_deltas={})],
        provides=PROM,
    )
    for key, value in kw.items():
        setattr(ev, key, value)
    return ev


def by_code(evidence: list[Evidence], required: list[str] = REQUIRED) -> dict[str, tuple[str, list[str]]]:
    return {c.code: (c.status, c.lacking) for c in coverage(evidence, required).checks}


def test_every_catalogue_check_is_listed_with_all_some_or_none() -> None:
    evs = [node("gpu-001"), node("gpu-002", ib_ports=None), node("gpu-003")]
    got = by_code(evs)
    assert list(got) == [c.code for c in CATALOGUE]
    assert got["gpu-xid"] == ("all", []) and got["gpu-ecc-dbe"] == ("all", [])
    assert got["ib-port"] == ("some", ["gpu-002"]) and got["ib-errors"] == ("some", ["gpu-002"])
    # facts the source does not provide: no evidence anywhere
    assert (
        got["mount"] == ("none", []) and got["gpu-nvlink"] == ("none", []) and got["slurmd"] == ("none", [])
    )
    cov = coverage(evs, REQUIRED)
    assert cov.ok and cov.missing_required == [] and not cov.last_value_xids
    assert cov.xid_modes == {"count": ["gpu-001", "gpu-002", "gpu-003"]}


def test_a_required_check_no_node_can_evaluate_is_missing() -> None:
    evs = [node(n, provides=PROM - {"row_remap"}) for n in ("gpu-001", "gpu-002")]
    cov = coverage(evs, [*REQUIRED, "slurmd"])
    assert cov.missing_required == ["gpu-row-remap", "slurmd"] and not cov.ok
    text = render_text(cov, "prometheus")
    assert "required checks without evidence: gpu-row-remap, slurmd" in text
    assert "slurmd *" in text and "not provided by this source" in text
    # provided, but no node has it now (every node unreadable): said apart
    down = [Evidence(n, "prometheus", NOW, reachable=False, error="stale", provides=PROM) for n in ("a", "b")]
    gone = coverage([*down, node("c", gpus=[node("c").gpus[0]], provides=PROM)], REQUIRED)
    assert {c.code: (c.status, c.provided) for c in gone.checks}["gpu-pcie"] == ("some", True)
    nobody = coverage([node("x", ib_ports=None)], REQUIRED)
    assert "ib-port             ib             no node has it now" in render_text(nobody, "prometheus")


def test_a_required_check_some_nodes_lack_is_per_node_not_fleet_wide() -> None:
    one_gpu_unknown = node("gpu-002")
    one_gpu_unknown.gpus[1].ecc_dbe_volatile = None
    evs = [
        node("gpu-001"),
        one_gpu_unknown,
        Evidence("gpu-003", "prometheus", NOW, reachable=False, error="stale"),
    ]
    cov = coverage(evs, REQUIRED)
    assert cov.ok  # covered somewhere: the lacking nodes are UNKNOWN, the pass can still act elsewhere
    assert cov.nodes_lacking_required == {
        "gpu-002": ["gpu-ecc-dbe"],
        "gpu-003": ["gpu-count", "gpu-xid", "gpu-ecc-dbe", "gpu-row-remap"],
    }
    assert by_code(evs)["gpu-ecc-dbe"] == ("some", ["gpu-002", "gpu-003"])
    assert cov.xid_modes == {"count": ["gpu-001", "gpu-002"], "none": ["gpu-003"]}


def test_last_value_xids_are_flagged() -> None:
    evs = [node("gpu-001"), node("gpu-002", xid_mode="last-value", xids=[XidEvent(45, gpu=0)])]
    cov = coverage(evs, REQUIRED)
    assert cov.last_value_xids and cov.xid_modes == {"count": ["gpu-001"], "last-value": ["gpu-002"]}
    text = render_text(cov, "prometheus")
    assert "XID mode: count on gpu-001; last-value on gpu-002" in text and "refuses to act" in text


@pytest.mark.parametrize(
    ("fact", "change", "has"),
    [
        ("row_remap", {"remap_pending": None}, True),  # the failure flag alone answers the check
        ("row_remap", {"remap_pending": None, "remap_failure": None}, False),
        ("pcie", {"pcie_width": None}, False),
        ("ecc", {"ecc_dbe_volatile": None}, False),
    ],
)
def test_per_gpu_facts_need_every_gpu(fact: str, change: dict[str, object], has: bool) -> None:
    ev = node("gpu-001")
    for key, value in change.items():
        setattr(ev.gpus[1], key, value)
    assert has_fact(ev, fact) is has
    assert has_fact(node("gpu-001", gpus=[], gpu_count=0), "ecc")  # no GPU: nothing to lack


def test_required_checks_setting_is_validated() -> None:
    assert HealthSection().required_checks == ["gpu-count", "gpu-xid", "gpu-ecc-dbe", "gpu-row-remap"]
    HealthSection(required_checks=["ib-port", "mount"]).validate()
    with pytest.raises(ValueError, match="required_checks: unknown check bogus"):
        HealthSection(required_checks=["gpu-xid", "bogus"]).validate()
    with pytest.raises(ValueError, match="unknown check evidence"):  # a verdict code, not a check
        HealthSection(required_checks=["evidence"]).validate()


def _with_recovery(name: str, actions: list[str | None]) -> Evidence:
    ev = node(name, provides=PROM | {"recovery"})
    for g, action in zip(ev.gpus, actions, strict=True):
        g.recovery_action = action
    return ev


def test_the_recovery_action_is_per_gpu_and_its_absence_over_prometheus_is_spelt_out() -> None:
    # every GPU must have it; nvidia-smi's "Reset Required" alone answers too (the ssh source)
    assert has_fact(_with_recovery("gpu-001", ["none", "reboot"]), "recovery")
    assert not has_fact(_with_recovery("gpu-001", ["none", None]), "recovery")
    smi = _with_recovery("gpu-001", [None, None])
    for g in smi.gpus:
        g.reset_required = False
    assert has_fact(smi, "recovery")
    # the pinned DCGM's exporter serves no field 1523: not provided, and the table says what follows
    cov = coverage([node("gpu-001"), node("gpu-002")], REQUIRED)
    assert {c.code: (c.status, c.provided) for c in cov.checks}["gpu-recovery"] == ("none", False)
    text = render_text(cov, "prometheus")
    assert "recovery action: DCGM field 1523" in text and "is not served on any node" in text
    assert "XID 154 counted there takes the catalogue's class (reset_gpu)" in text
    # one node's exporter lacks it: named
    evs = [_with_recovery("gpu-001", ["none", "none"]), _with_recovery("gpu-002", [None, None])]
    part = coverage(evs, REQUIRED)
    assert {c.code: c.lacking for c in part.checks}["gpu-recovery"] == ["gpu-002"]
    assert "is not served on gpu-002:" in render_text(part, "prometheus")
    # served everywhere, or a source without Prometheus: no such line
    full = coverage([_with_recovery("gpu-001", ["none", "reset"])], REQUIRED)
    assert "recovery action:" not in render_text(full, "prometheus")
    assert "recovery action:" not in render_text(cov, "ssh")
