"""UNKNOWN ends (issue 20, item 4): evidence a node lacks for a required family while other nodes have
it becomes FAIL ``evidence-lost`` after ``[health] unknown_fail_after`` and is drained like any
other FAIL; a source lost on every node never is (one page instead); a node UNKNOWN longer than
``unknown_alert_after`` raises an alert; the clocks live in the state file."""

from __future__ import annotations

import json
from pathlib import Path

from memory_slurm import InMemorySlurm
from test_policy import NOW, RecordingSlurm, actions, cluster, ok, unknown

from opsctl.checks.model import Status
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.remediation.actions import act
from opsctl.remediation.alerts import build_alerts
from opsctl.remediation.policy import decide, is_fatal
from opsctl.remediation.state import PolicyState
from opsctl.remediation.unknown import judge_unknown

CFG = PolicyConfig(unknown_fail_after=600.0, unknown_alert_after=300.0)


def one_pass(reps: list[NodeReport], lacking: dict[str, list[str]], state: PolicyState, now: float,
             slurm: RecordingSlurm, cfg: PolicyConfig = CFG):
    alerts = judge_unknown(reps, lacking, state, cfg, now, count=True)
    ds = decide(reps, slurm.nodes, state, cfg, now) + alerts
    act(ds, slurm, state, now, dry_run=False, shadow=False)
    return ds


def test_one_node_lacking_a_family_others_have_fails_evidence_lost_after_unknown_fail_after():
    nodes = cluster(8)
    slurm, state = RecordingSlurm(nodes), PolicyState()
    lacking = {"gpu-003": ["gpu-xid"]}
    for t in (0, 300, 599):
        reps = [unknown(n) if n == "gpu-003" else ok(n) for n in nodes]
        ds = one_pass(reps, lacking, state, NOW + t, slurm)
        assert actions(ds, "drain") == [], t
    ds = one_pass([unknown(n) if n == "gpu-003" else ok(n) for n in nodes], lacking, state, NOW + 600, slurm)
    (d,) = [d for d in ds if d.action == "drain"]
    assert (d.node, d.code, d.result) == ("gpu-003", "evidence-lost", "applied")
    assert d.reason.startswith("opsctl:health:evidence-lost:") and "gpu-xid" in d.reason
    assert d.latch["action"] == "reboot"  # resumed once a new boot shows full, clean evidence
    assert slurm.calls == [("drain", "gpu-003", d.reason)]
    # counted against the brake like any other drain
    assert [x["node"] for x in state.drains] == ["gpu-003"] and state.drains[0]["allowance"] == "brake"


def test_evidence_lost_spends_the_brake_only_never_the_fatal_allowance():
    nodes = cluster(8)
    slurm = RecordingSlurm(nodes)
    # the brake (max_drains 2 of 8 nodes at 10%: 1) is spent by an earlier drain
    state = PolicyState(unknown_since={"gpu-003": {"gpu-xid": NOW - 900}},
                        drains=[{"node": "gpu-001", "time": NOW - 60, "reason": "x", "owner": "health"}])
    ds = one_pass([unknown(n) if n == "gpu-003" else ok(n) for n in nodes], {"gpu-003": ["gpu-xid"]}, state,
                  NOW, slurm)
    assert actions(ds, "drain") == [] and actions(ds, "hold") == ["gpu-003"]
    assert [d.code for d in ds if d.action == "alert"] == ["brake"]
    rep = unknown("gpu-003")
    judge_unknown([rep], {"gpu-003": ["gpu-xid"]}, state, CFG, NOW, count=False)
    (lost,) = [v for v in rep.verdicts if v.code == "evidence-lost"]
    assert not is_fatal(lost)


def test_the_family_back_resets_the_clock():
    nodes = cluster(4)
    slurm, state = RecordingSlurm(nodes), PolicyState()
    one_pass([unknown("gpu-002"), ok("gpu-001"), ok("gpu-003"), ok("gpu-004")], {"gpu-002": ["gpu-xid"]},
             state, NOW, slurm)
    assert state.unknown_since == {"gpu-002": {"gpu-xid": NOW}}
    one_pass([ok(n) for n in nodes], {}, state, NOW + 400, slurm)
    assert state.unknown_since == {}
    ds = one_pass([unknown("gpu-002"), ok("gpu-001"), ok("gpu-003"), ok("gpu-004")], {"gpu-002": ["gpu-xid"]},
                  state, NOW + 700, slurm)
    assert actions(ds, "drain") == []


def test_a_source_lost_on_every_node_drains_nobody_and_pages_once():
    nodes = cluster(8)
    slurm, state = RecordingSlurm(nodes), PolicyState()
    # every node unreadable: no node has any family, so nothing is "lacking while others have it"
    pages = []
    for t in (0, 200, 400, 3600, 86400):
        ds = one_pass([unknown(n) for n in nodes], {}, state, NOW + t, slurm)
        assert actions(ds, "drain") == [] and actions(ds, "hold") == []
        pages.append([d for d in ds if d.action == "alert"])
    assert pages[:2] == [[], []]  # not before unknown_alert_after
    for alerts in pages[2:]:
        (a,) = alerts  # one alert for the fleet, not one per node
        assert a.code == "source-lost" and a.node == "gpu-[001-008]"
        (sent,) = build_alerts(alerts, NOW, 300)
        assert sent["labels"]["severity"] == "page"
    assert slurm.calls == [] and state.drains == []


def test_a_node_unknown_longer_than_unknown_alert_after_raises_an_alert():
    nodes = cluster(8)
    slurm, state = RecordingSlurm(nodes), PolicyState()
    # UNKNOWN for a non-required fact (nothing lacking for evidence-lost): never drained, but told
    for t, want in ((0, []), (299, []), (300, ["unknown"]), (5000, ["unknown"])):
        ds = one_pass([unknown(n) if n == "gpu-005" else ok(n) for n in nodes], {}, state, NOW + t, slurm)
        assert [d.code for d in ds if d.action == "alert"] == want, t
        assert actions(ds, "drain") == []
    (a,) = [d for d in ds if d.action == "alert"]
    assert a.node == "gpu-005" and "5000s" in a.why
    assert build_alerts([a], NOW, 300)[0]["labels"]["alertname"] == "OpsctlNodeUnknown"
    # clean again: the clock is gone, so is the alert
    ds = one_pass([ok(n) for n in nodes], {}, state, NOW + 5015, slurm)
    assert [d for d in ds if d.action == "alert"] == [] and state.unknown_node_since == {}


def test_the_clocks_survive_a_restart_and_old_state_files_load(tmp_path: Path):
    path = tmp_path / "state.json"
    nodes = cluster(4)
    slurm, state = RecordingSlurm(nodes), PolicyState()
    reps = [unknown("gpu-002"), ok("gpu-001"), ok("gpu-003"), ok("gpu-004")]
    one_pass(reps, {"gpu-002": ["gpu-ecc-dbe"]}, state, NOW, slurm)
    state.save(path)
    again = PolicyState.load(path)  # a restarted service
    assert again.unknown_since == {"gpu-002": {"gpu-ecc-dbe": NOW}}
    assert again.unknown_node_since == {"gpu-002": NOW}
    reps = [unknown("gpu-002"), ok("gpu-001"), ok("gpu-003"), ok("gpu-004")]
    ds = one_pass(reps, {"gpu-002": ["gpu-ecc-dbe"]}, again, NOW + 600, slurm)
    assert [(d.node, d.code) for d in ds if d.action == "drain"] == [("gpu-002", "evidence-lost")]
    # a state file written before this change (no clocks) loads, its latches intact
    old = {"drains": [], "clean_streak": {}, "latches": {"gpu-001": {"reason": "opsctl:health:gpu-xid:x",
                                                                      "time": NOW, "code": "gpu-xid",
                                                                      "action": "reboot"}},
           "probe_timeouts": {}}
    path.write_text(json.dumps(old))
    loaded = PolicyState.load(path)
    assert loaded.unknown_since == {} and loaded.unknown_node_since == {}
    assert loaded.latch("gpu-001").action == "reboot"


def test_a_plain_pass_shows_evidence_lost_from_the_kept_clocks_without_changing_them():
    state = PolicyState(unknown_since={"gpu-002": {"gpu-xid": NOW - 700}})
    rep = unknown("gpu-002")
    assert judge_unknown([rep], {"gpu-002": ["gpu-xid"]}, state, CFG, NOW, count=False) == []
    assert rep.status is Status.FAIL and [v.code for v in rep.verdicts][-1] == "evidence-lost"
    assert state.unknown_since == {"gpu-002": {"gpu-xid": NOW - 700}} and state.unknown_node_since == {}


def _health_ctx(tmp_path: Path, backend, **health):
    from opsctl.checks.settings import HealthSection
    from opsctl.config import AuditSection, Config
    from opsctl.health import service

    config = Config(sections={"audit": AuditSection(log=str(tmp_path / "audit.jsonl"))})
    h = HealthSection(state_file=str(tmp_path / "state.json"), decision_log=str(tmp_path / "d.jsonl"),
                      expected_gpus=8, required_checks=["gpu-count", "gpu-xid"], max_fraction=1.0, **health)
    return service.HealthContext(health=h, slurm=backend, config=config)  # type: ignore[arg-type]


class _SshLike:
    """An SSH source whose session to gpu-004 never returns: nvidia-smi in D-state holds it past the
    node timeout, so the node is unreadable (no probe result at all, hence no probe-hung streak)."""

    name = "ssh"

    def collect(self, nodes, now):
        from opsctl.evidence.model import Evidence

        out = []
        for n in nodes:
            if n == "gpu-004":
                out.append(Evidence(n, "ssh", now, reachable=False,
                                    error="timed out after 60s (at nvidia-smi)"))
                continue
            ev = Evidence(n, "ssh", now, gpu_count=8, provides=frozenset({"gpu_count", "xid"}), boot_id="b1",
                          xid_mode="kernel-log")
            ev.xids = []
            out.append(ev)
        return out


def test_an_ssh_probe_that_never_returns_ends_as_evidence_lost_within_unknown_fail_after(tmp_path: Path):
    from opsctl.health import service

    backend = InMemorySlurm()
    ctx = _health_ctx(tmp_path, backend, unknown_fail_after=600.0, unknown_alert_after=300.0)
    nodes = sorted(backend.all)
    seen = []
    for t in (0, 15, 300, 585, 600):
        res = service.run_health(ctx, nodes, _SshLike(), remediate=True, now=NOW + t)
        seen.append([(d.node, d.action, d.code) for d in res.decisions if d.action in ("drain", "alert")])
    assert seen[:2] == [[], []]
    assert seen[2] == seen[3] == [("gpu-004", "alert", "unknown")]  # a ticket first
    assert seen[4] == [("gpu-004", "drain", "evidence-lost")]
    assert backend.all["gpu-004"].reason.startswith("opsctl:health:evidence-lost:")
    # a plain pass (opsctl health) shows the same FAIL from the service's clocks
    plain = service.run_health(ctx, nodes, _SshLike(), remediate=False, now=NOW + 630)
    assert {r.node: r.status.value for r in plain.reports}["gpu-004"] == "FAIL"


def test_a_family_missing_on_every_node_is_refused_with_one_page_however_long(tmp_path: Path):
    from opsctl.evidence.model import Evidence
    from opsctl.health import service

    class Xids(_SshLike):
        """Every node readable; the XID family only on the nodes in ``having``."""

        def __init__(self, having: set[str]) -> None:
            self.having = having

        def collect(self, nodes, now):
            out = []
            for n in nodes:
                ev = Evidence(n, "ssh", now, gpu_count=8, provides=frozenset({"gpu_count", "xid"}),
                              boot_id="b1", xid_mode="kernel-log")
                ev.xids = [] if n in self.having else None
                out.append(ev)
            return out

    backend = InMemorySlurm()
    ctx = _health_ctx(tmp_path, backend, unknown_fail_after=600.0, unknown_alert_after=300.0)
    nodes = sorted(backend.all)
    for t in (0, 600, 1200, 7200):
        res = service.run_health(ctx, nodes, Xids(set()), remediate=True, now=NOW + t)
        assert [d.action for d in res.decisions] == ["alert"] and res.decisions[0].code == "coverage"
    assert all(not n.drain_flag for n in backend.all.values())
    # the family comes back on all nodes but one: its clock starts now, not at the outage's start
    back = Xids(set(nodes) - {"gpu-004"})
    res = service.run_health(ctx, nodes, back, remediate=True, now=NOW + 7215)
    assert [d for d in res.decisions if d.action == "drain"] == []
    res = service.run_health(ctx, nodes, back, remediate=True, now=NOW + 7215 + 600)
    assert [(d.node, d.code) for d in res.decisions if d.action == "drain"] == [("gpu-004", "evidence-lost")]
