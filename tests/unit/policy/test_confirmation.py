"""A FAIL of no fatal class drains only once it has persisted for ``confirm_after``.

Prometheus scrapes the nodes at different offsets, so a fleet-wide false FAIL (an uncabled port read
as ib-port, a Lustre outage) first shows on a few nodes, below the storm threshold. Drained at first
sight, those nodes spent the brake and stayed drained (bench/rehearsal.py false-storm-plus-xid). A
fatal-class FAIL (XID 79) is not delayed."""

from __future__ import annotations

import pytest
from test_storm_signatures import RecordingSlurm, by_action, cluster, ib_port, report, xid

from opsctl.checks.model import Status
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.errors import ConfigError
from opsctl.remediation.actions import act
from opsctl.remediation.policy import decide
from opsctl.remediation.state import PolicyState

NOW = 1_700_000_000.0
CFG = PolicyConfig(confirm_after=10.0, max_drains=4, max_fraction=1.0)


def ok(node: str) -> NodeReport:
    return NodeReport(node, Status.OK, [])


def run(nodes, reps, state, now, cfg=CFG):
    ds = decide(reps, nodes, state, cfg, now)
    act(ds, RecordingSlurm(nodes), state, now, dry_run=False, shadow=False)
    return ds


def test_a_storm_arriving_across_scrape_offsets_drains_none_of_its_first_nodes():
    nodes = cluster(64)
    state = PolicyState()
    # pass 1: the port reads down on the 2 nodes scraped since the event, and XID 79 on gpu-040
    first = [report("gpu-001", ib_port("gpu-001")), report("gpu-002", ib_port("gpu-002")),
             report("gpu-040", xid("gpu-040"))]
    first += [ok(n) for n in nodes if n not in ("gpu-001", "gpu-002", "gpu-040")]
    ds = run(nodes, first, state, NOW)
    assert [d.node for d in by_action(ds, "drain")] == ["gpu-040"]  # fatal: at first sight
    confirming = [d for d in ds if d.why.startswith("confirming")]
    assert sorted(d.node for d in confirming) == ["gpu-001", "gpu-002"]
    assert all(d.action == "none" and d.code == "ib-port" for d in confirming)
    assert by_action(ds, "alert") == []  # nothing held: no brake ticket for a FAIL not yet confirmed
    # pass 2, one interval later: every node's scrape shows it; a storm, and nobody drained for it
    second = [report(n, ib_port(n)) for n in nodes if n != "gpu-040"] + [report("gpu-040", xid("gpu-040"))]
    ds = run(nodes, second, state, NOW + 15)
    assert by_action(ds, "drain") == []
    (storm,) = by_action(ds, "alert")
    assert storm.code == "storm" and storm.signature == "ib-port"
    assert [n for n in nodes if nodes[n].drain_flag] == ["gpu-040"]


def test_a_non_fatal_fail_that_persists_is_drained_once_confirmed():
    nodes = cluster(8)
    state = PolicyState()
    bad = [report("gpu-003", ib_port("gpu-003"))] + [ok(n) for n in nodes if n != "gpu-003"]
    assert by_action(run(nodes, bad, state, NOW), "drain") == []
    assert by_action(run(nodes, bad, state, NOW + 5), "drain") == []  # 5 s: still confirming
    (drain,) = by_action(run(nodes, bad, state, NOW + 10), "drain")
    assert drain.node == "gpu-003" and drain.reason.startswith("opsctl:health:ib-port:")
    assert nodes["gpu-003"].drain_flag


def test_a_clean_pass_between_two_fails_starts_the_clock_again():
    nodes = cluster(8)
    state = PolicyState()
    bad = [report("gpu-003", ib_port("gpu-003"))] + [ok(n) for n in nodes if n != "gpu-003"]
    clean = [ok(n) for n in nodes]
    run(nodes, bad, state, NOW)
    run(nodes, clean, state, NOW + 5)
    assert "gpu-003" not in state.failing_since
    assert by_action(run(nodes, bad, state, NOW + 10), "drain") == []  # first seen again at +10
    assert by_action(run(nodes, bad, state, NOW + 20), "drain") != []


def test_an_unknown_pass_keeps_the_clock_and_the_state_file_keeps_it(tmp_path):
    nodes = cluster(8)
    state = PolicyState()
    bad = [report("gpu-003", ib_port("gpu-003"))] + [ok(n) for n in nodes if n != "gpu-003"]
    run(nodes, bad, state, NOW)
    unknown = [NodeReport("gpu-003", Status.UNKNOWN, [])] + [ok(n) for n in nodes if n != "gpu-003"]
    run(nodes, unknown, state, NOW + 5)
    path = tmp_path / "state.json"
    state.save(path)
    state = PolicyState.load(path)
    assert state.failing_since == {"gpu-003": {"ib-port": NOW}}
    assert [d.node for d in by_action(run(nodes, bad, state, NOW + 10), "drain")] == ["gpu-003"]


def test_confirm_after_zero_drains_at_first_sight_and_is_validated():
    nodes = cluster(8)
    bad = [report("gpu-003", ib_port("gpu-003"))] + [ok(n) for n in nodes if n != "gpu-003"]
    cfg = PolicyConfig(confirm_after=0, max_drains=4, max_fraction=1.0)
    assert [d.node for d in by_action(run(nodes, bad, PolicyState(), NOW, cfg), "drain")] == ["gpu-003"]
    PolicyConfig(confirm_after=0).validate()
    with pytest.raises(ConfigError, match="confirm_after"):
        PolicyConfig(confirm_after=-1).validate()
