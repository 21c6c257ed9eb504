from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.errors import ConfigError
from opsctl.remediation.actions import DecisionLog, act
from opsctl.remediation.policy import decide, drain_reason
from opsctl.remediation.state import PolicyState

NOW = 1_700_000_000.0


@dataclass
class FakeNode:
    name: str
    state: str = "idle"
    reason: str = ""
    flags: set[str] = field(default_factory=set)

    @property
    def drain_flag(self) -> bool:
        return "DRAIN" in self.flags


class RecordingSlurm:
    """Records calls and keeps node state like slurmctld would (drain sets the reason)."""

    def __init__(self, nodes: dict[str, FakeNode]) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str, str]] = []

    def drain(self, names, reason):
        for n in names:
            self.calls.append(("drain", n, reason))
            self.nodes[n].flags.add("DRAIN")
            self.nodes[n].reason = reason

    def resume(self, names):
        for n in names:
            self.calls.append(("resume", n, ""))
            self.nodes[n].flags.discard("DRAIN")
            self.nodes[n].reason = ""


def cluster(n: int = 8) -> dict[str, FakeNode]:
    return {f"gpu-{i:03d}": FakeNode(f"gpu-{i:03d}") for i in range(1, n + 1)}


def ok(node: str) -> NodeReport:
    return NodeReport(node, Status.OK, [Verdict("gpu-xid", Status.OK, node, None, "fine")])


def xid(node: str, code: int = 79, gpu: int = 3) -> NodeReport:
    v = Verdict(
        "gpu-xid", Status.FAIL, node, gpu, f"xid {code}", {"xid": code, "short": f"xid {code} gpu {gpu}"}
    )
    return NodeReport(node, Status.FAIL, [v])


def ib_down(node: str) -> NodeReport:
    """A fault that needs no proof of repair (a port back up is its own proof)."""
    v = Verdict("ib-port", Status.FAIL, node, None, "mlx5_2/1: state DOWN", {"short": "mlx5_2 state DOWN"})
    return NodeReport(node, Status.FAIL, [v])


def unknown(node: str) -> NodeReport:
    return NodeReport(node, Status.UNKNOWN, [Verdict("evidence", Status.UNKNOWN, node, None, "no series")])


def reports(nodes, bad: dict[str, NodeReport] | None = None):
    bad = bad or {}
    return [bad.get(n, ok(n)) for n in nodes]


def actions(decisions, action):
    return [d.node for d in decisions if d.action == action]


def run_pass(nodes, reps, state, cfg, now, slurm):
    ds = decide(reps, nodes, state, cfg, now)
    act(ds, slurm, state, now, dry_run=False, shadow=False)
    return ds


def test_one_bad_node_is_drained_with_reason():
    nodes = cluster()
    ds = decide(reports(nodes, {"gpu-003": xid("gpu-003")}), nodes, PolicyState(), PolicyConfig(), NOW)
    (d,) = [d for d in ds if d.action == "drain"]
    assert d.node == "gpu-003" and d.reason == "opsctl:health:gpu-xid:xid 79 gpu 3"
    assert d.latch["action"] == "reboot" and d.latch["gpu"] == 3
    assert d.verdicts[0]["evidence"]["xid"] == 79
    assert all(d.action == "none" for d in ds if d.node != "gpu-003")


def test_unknown_never_drains_or_resumes():
    nodes = cluster()
    nodes["gpu-002"].flags.add("DRAIN")
    nodes["gpu-002"].reason = "opsctl:gpu-xid:xid 79 gpu 3"
    state = PolicyState(clean_streak={"gpu-002": 2})
    ds = decide(
        reports(nodes, {"gpu-001": unknown("gpu-001"), "gpu-002": unknown("gpu-002")}),
        nodes,
        state,
        PolicyConfig(),
        NOW,
    )
    assert actions(ds, "drain") == [] and actions(ds, "resume") == []
    assert "gpu-002" not in state.clean_streak  # unknown breaks the clean streak


def test_operator_drain_is_left_alone():
    nodes = cluster()
    nodes["gpu-004"].flags.add("DRAIN")
    nodes["gpu-004"].reason = "bad DIMM, ticket 1234"
    ds = decide(reports(nodes, {"gpu-004": xid("gpu-004")}), nodes, PolicyState(), PolicyConfig(), NOW)
    (d,) = [d for d in ds if d.node == "gpu-004"]
    assert d.action == "none" and "operator drain" in d.why
    # and a clean operator-drained node is never resumed by opsctl
    state = PolicyState(clean_streak={"gpu-004": 99})
    ds = decide(reports(nodes), nodes, state, PolicyConfig(resume_after_clean=1), NOW)
    assert actions(ds, "resume") == []


def test_storm_same_signature_on_half_the_nodes_alerts_and_drains_none():
    nodes = cluster()
    bad = {n: xid(n) for n in list(nodes)[:4]}
    ds = decide(reports(nodes, bad), nodes, PolicyState(), PolicyConfig(), NOW)
    assert actions(ds, "drain") == []
    (alert,) = [d for d in ds if d.action == "alert"]
    assert alert.node == "gpu-[001-004]" and "storm" in alert.why and "gpu-xid:xid79" in alert.why


def test_different_faults_on_several_nodes_are_not_a_storm_but_the_brake_holds():
    nodes = cluster(64)
    names = list(nodes)
    bad = {names[i]: xid(names[i], code, 0) for i, code in enumerate([79, 48, 74, 95, 119])}
    # the brake alone: fatal faults past it have their own allowance (test_fatal_allowance.py)
    cfg = PolicyConfig(max_drains=2, max_fraction=0.10, fatal_max_drains=0)
    ds = decide(reports(nodes, bad), nodes, PolicyState(), cfg, NOW)
    assert len(actions(ds, "drain")) == 2 and len(actions(ds, "hold")) == 3
    # XIDs are fatal: each held node is paged by name (a non-fatal hold raises the brake's ticket)
    assert [d.code for d in ds if d.action == "alert"] == ["fatal-held"] * 3


def test_brake_counts_drains_across_passes_in_the_window():
    nodes = cluster(64)
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(max_drains=2, window_seconds=3600, fatal_max_drains=0)  # the brake alone
    state = PolicyState()
    run_pass(nodes, reports(nodes, {"gpu-001": xid("gpu-001")}), state, cfg, NOW, slurm)
    run_pass(
        nodes,
        reports(nodes, {"gpu-001": xid("gpu-001"), "gpu-002": xid("gpu-002", 48)}),
        state,
        cfg,
        NOW + 60,
        slurm,
    )
    ds = run_pass(
        nodes,
        reports(
            nodes, {"gpu-001": xid("gpu-001"), "gpu-002": xid("gpu-002", 48), "gpu-003": xid("gpu-003", 74)}
        ),
        state,
        cfg,
        NOW + 120,
        slurm,
    )
    assert [c[1] for c in slurm.calls if c[0] == "drain"] == ["gpu-001", "gpu-002"]
    assert actions(ds, "hold") == ["gpu-003"]
    # an hour later the window has moved on: the third node may be drained
    ds = run_pass(nodes, reports(nodes, {"gpu-003": xid("gpu-003", 74)}), state, cfg, NOW + 3700, slurm)
    assert actions(ds, "drain") == ["gpu-003"]


def test_flapping_node_needs_k_consecutive_clean_passes():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    state = PolicyState()
    seq = ["bad", "ok", "ok", "bad", "ok", "unknown", "ok", "ok", "ok"]
    resumed_at = []
    t = NOW
    for i, s in enumerate(seq):
        t += 30
        r = {"bad": ib_down("gpu-005"), "ok": ok("gpu-005"), "unknown": unknown("gpu-005")}[s]
        ds = run_pass(nodes, reports(nodes, {"gpu-005": r}), state, cfg, t, slurm)
        if "gpu-005" in actions(ds, "resume"):
            resumed_at.append(i)
    assert resumed_at == [8]
    assert [c[0] for c in slurm.calls] == ["drain", "resume"]  # drained once, kept, resumed once


def test_resume_only_while_the_reason_is_still_ours():
    nodes = cluster()
    nodes["gpu-006"].flags.add("DRAIN")
    nodes["gpu-006"].reason = "opsctl:gpu-xid:xid 79 gpu 3"
    state = PolicyState()
    cfg = PolicyConfig(resume_after_clean=2)
    decide(reports(nodes), nodes, state, cfg, NOW)
    nodes["gpu-006"].reason = "operator took over: RMA"  # an operator re-drained it in between
    ds = decide(reports(nodes), nodes, state, cfg, NOW + 30)
    assert actions(ds, "resume") == []


def test_dry_run_and_shadow_change_nothing_in_slurm(tmp_path):
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    for mode in ("dry_run", "shadow"):
        state = PolicyState()
        ds = decide(reports(nodes, {"gpu-003": xid("gpu-003")}), nodes, state, PolicyConfig(), NOW)
        act(ds, slurm, state, NOW, dry_run=mode == "dry_run", shadow=mode == "shadow")
        (d,) = [d for d in ds if d.action == "drain"]
        assert d.result == ("dry-run" if mode == "dry_run" else "shadow")
        # dry-run records nothing; shadow records in its own (shadow) state what it would have done
        assert [x["node"] for x in state.drains] == ([] if mode == "dry_run" else ["gpu-003"])
        assert list(state.latches) == ([] if mode == "dry_run" else ["gpu-003"])
    assert slurm.calls == []
    log = DecisionLog(tmp_path / "audit.jsonl")
    log.write(ds, NOW, "shadow")
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    # the failing node's decision is logged; healthy nodes left alone are not
    assert [x["node"] for x in lines] == ["gpu-003"] and {x["mode"] for x in lines} == {"shadow"}
    assert next(x for x in lines if x["action"] == "drain")["verdicts"][0]["evidence"]["xid"] == 79


def test_a_failed_drain_is_recorded_and_others_proceed():
    nodes = cluster(64)

    class Flaky(RecordingSlurm):
        def drain(self, names, reason):
            if names == ["gpu-001"]:
                raise RuntimeError("slurmctld said no")
            super().drain(names, reason)

    slurm = Flaky(nodes)
    state = PolicyState()
    ds = run_pass(
        nodes,
        reports(nodes, {"gpu-001": xid("gpu-001"), "gpu-002": xid("gpu-002", 48)}),
        state,
        PolicyConfig(),
        NOW,
        slurm,
    )
    results = {d.node: d.result for d in ds if d.action == "drain"}
    assert results == {"gpu-001": "failed", "gpu-002": "applied"}
    assert [d["node"] for d in state.drains] == ["gpu-002"]


def test_state_file_roundtrip_and_corruption(tmp_path):
    p = tmp_path / "state.json"
    s = PolicyState(drains=[{"node": "a", "time": NOW, "reason": "r"}], clean_streak={"a": 2})
    s.save(p)
    assert PolicyState.load(p) == s
    assert PolicyState.load(tmp_path / "absent.json") == PolicyState()
    p.write_text("{not json")
    with pytest.raises(ConfigError):
        PolicyState.load(p)


def test_drain_reason_is_sanitised_and_bounded():
    v = Verdict("mount", Status.FAIL, "n", None, "x", {"short": "/lustre: 'hung' \"now\"" + "x" * 200})
    r = drain_reason(v)
    assert r.startswith("opsctl:health:mount:/lustre hung now") and len(r) <= 120 and "'" not in r


def test_config_validation():
    with pytest.raises(ConfigError):
        PolicyConfig(storm_min_nodes=1).validate()
    with pytest.raises(ConfigError):
        PolicyConfig(max_fraction=2).validate()
    PolicyConfig().validate()


def test_storm_arriving_over_several_passes_counts_recent_drains():
    nodes = cluster(8)
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(max_drains=5, max_fraction=1.0)
    state = PolicyState()
    ds = run_pass(nodes, reports(nodes, {"gpu-001": xid("gpu-001")}), state, cfg, NOW, slurm)
    assert actions(ds, "drain") == ["gpu-001"]
    # two more nodes with the same signature a pass later: with gpu-001 that makes three, a storm
    ds = run_pass(
        nodes,
        reports(nodes, {"gpu-001": xid("gpu-001"), "gpu-002": xid("gpu-002"), "gpu-003": xid("gpu-003")}),
        state,
        cfg,
        NOW + 30,
        slurm,
    )
    assert actions(ds, "drain") == []
    assert [d.action for d in ds if d.action == "alert"] == ["alert"]
    # a different fault on another node is still handled normally
    ds = run_pass(nodes, reports(nodes, {"gpu-004": xid("gpu-004", 48)}), state, cfg, NOW + 60, slurm)
    assert actions(ds, "drain") == ["gpu-004"]
