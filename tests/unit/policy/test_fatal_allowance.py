"""A fatal node is never left silently in service (issue 20, item 1).

When the brake or the drain guardrail ([guardrails] max_drain_fraction, which counts every node out
of service, operators' drains included) stops a drain, a node failing a fatal-class check (one whose
fix is a GPU reset, a reboot or a replacement: XID 79, a double-bit ECC error, a failed row remap, a
GPU missing) is drained anyway under a small separate allowance (``[health] fatal_max_drains`` per
brake window); once that is spent too, it is latched in service (the latch remembers the reboot it
needs after the fault clears) and paged, every pass, until it is drained or repaired. A non-fatal
FAIL is still held by the guardrail, as before, and the storm rule holds fatal signatures too."""

from __future__ import annotations

from pathlib import Path

from memory_slurm import InMemorySlurm
from test_policy import NOW, RecordingSlurm, actions, cluster, ib_down, ok, reports, xid

from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.remediation.actions import act
from opsctl.remediation.alerts import build_alerts
from opsctl.remediation.policy import decide
from opsctl.remediation.state import PolicyState

REASON = "opsctl:health:gpu-xid:xid 79 gpu 3"


def six_with_an_operator_drain():
    """The measured case: 6 nodes, `opsctl drain gpu-002 --reason "operator hold"`."""
    nodes = cluster(6)
    nodes["gpu-002"].flags.add("DRAIN")
    nodes["gpu-002"].reason = "opsctl:manual:operator hold"
    return nodes


def run(nodes, reps, state, cfg, now, slurm, room):
    ds = decide(reps, nodes, state, cfg, now, guard_room=room)
    act(ds, slurm, state, now, dry_run=False, shadow=False)
    return ds


def booted(report: NodeReport, boot: str = "b1") -> NodeReport:
    report.boot_id = boot
    return report


def test_xid79_past_the_guardrail_is_drained_under_the_fatal_allowance_and_latched():
    nodes = six_with_an_operator_drain()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    # the guardrail: max(1, floor(0.10 * 6)) = 1 node may be out, gpu-002 already is: room 0
    ds = run(nodes, reports(nodes, {"gpu-003": booted(xid("gpu-003"))}), state, PolicyConfig(), NOW, slurm, 0)
    (d,) = [d for d in ds if d.action == "drain"]
    assert (d.node, d.reason, d.result) == ("gpu-003", REASON, "applied")
    assert "fatal" in d.why
    assert slurm.calls == [("drain", "gpu-003", REASON)]
    latch = state.latch("gpu-003")
    assert latch is not None and latch.action == "reboot" and latch.reason == REASON
    assert not latch.in_service
    # counted apart from the brake: the brake's own budget is untouched
    assert [x.get("allowance") for x in state.drains] == ["fatal"]
    # and paged: the partition is below its floor, the next fatal node may be held in service
    (alert,) = build_alerts([d for d in ds if d.action == "alert"], NOW, 300)
    labels = alert["labels"]
    assert (labels["alertname"], labels["severity"], labels["nodes"]) == (
        "OpsctlFatalDrainPastLimits", "page", "gpu-003")
    assert "guardrail" in alert["annotations"]["summary"], alert
    # the operator's drain is untouched, and the next pass keeps the node (latched, not re-drained)
    assert nodes["gpu-002"].reason == "opsctl:manual:operator hold"
    ds = run(nodes, reports(nodes, {"gpu-003": booted(xid("gpu-003"))}), state, PolicyConfig(), NOW + 30,
             slurm, 0)
    assert [d.action for d in ds if d.node == "gpu-003" and d.action != "alert"] == ["keep"]
    assert len(slurm.calls) == 1


def test_a_non_fatal_fail_in_the_same_situation_is_still_held_by_the_guardrail():
    nodes = six_with_an_operator_drain()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    cfg = PolicyConfig(confirm_after=0)  # confirmed: the guardrail is what this test is about
    ds = run(nodes, reports(nodes, {"gpu-003": ib_down("gpu-003")}), state, cfg, NOW, slurm, 0)
    assert actions(ds, "drain") == [] and slurm.calls == []
    (d,) = [d for d in ds if d.node == "gpu-003" and d.action != "alert"]
    assert d.action == "hold" and "guardrail" in d.why
    assert state.latches == {} and state.drains == []
    # not silent: the held node is alerted (a ticket, as the brake's holds are)
    (alert,) = [a for a in build_alerts(ds, NOW, 300)]
    assert alert["labels"]["nodes"] == "gpu-003" and alert["labels"]["severity"] == "ticket"


def test_fatal_allowance_spent_latches_in_service_and_pages_every_pass_until_drained():
    nodes = six_with_an_operator_drain()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    cfg = PolicyConfig(fatal_max_drains=2)
    # two fatal faults (different XIDs: not a storm) spend the allowance
    two = {"gpu-004": booted(xid("gpu-004", 48)), "gpu-005": booted(xid("gpu-005", 119))}
    run(nodes, reports(nodes, two), state, cfg, NOW, slurm, 0)
    assert sorted(n for _, n, _ in slurm.calls) == ["gpu-004", "gpu-005"]
    for i in range(3):  # pass after pass: not drained, latched, paged
        ds = run(nodes, reports(nodes, {"gpu-003": booted(xid("gpu-003"))}), state, cfg, NOW + 30 + i, slurm,
                 -2)
        (d,) = [d for d in ds if d.node == "gpu-003" and d.action != "alert"]
        assert d.action == "hold" and "fatal" in d.why
        assert not nodes["gpu-003"].drain_flag and len(slurm.calls) == 2
        latch = state.latch("gpu-003")
        assert latch is not None and latch.in_service and latch.action == "reboot" and latch.code == "gpu-xid"
        pages = [a for a in build_alerts(ds, NOW, 300) if a["labels"]["severity"] == "page"]
        (page,) = pages
        assert page["labels"]["nodes"] == "gpu-003"
        summary = page["annotations"]["summary"]
        assert "gpu-003" in summary and "gpu-xid" in summary and "not drained" in summary
        assert "fatal_max_drains" in summary


def test_the_latch_survives_the_fault_clearing_and_drains_when_the_allowance_frees():
    nodes = six_with_an_operator_drain()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    cfg = PolicyConfig(fatal_max_drains=0)  # no allowance at all: latched and paged at once
    run(nodes, reports(nodes, {"gpu-003": booted(xid("gpu-003"))}), state, cfg, NOW, slurm, 0)
    assert state.latch("gpu-003").in_service and slurm.calls == []
    # the fault clears (the XID ages out of the window), the same boot: it still needs a reboot
    for i in range(1, 5):
        clean = reports(nodes, {"gpu-003": booted(ok("gpu-003"))})
        ds = run(nodes, clean, state, cfg, NOW + 30 * i, slurm, 0)
        (d,) = [d for d in ds if d.node == "gpu-003" and d.action != "alert"]
        assert d.action == "hold" and "reboot" in d.why, d
        assert [a["labels"]["nodes"] for a in build_alerts(ds, NOW, 300)
                if a["labels"]["severity"] == "page"] == ["gpu-003"]
        assert state.latch("gpu-003").action == "reboot"
    # room again (the operator resumed gpu-002): drained for what it latched, though it looks clean
    nodes["gpu-002"].flags.discard("DRAIN")
    ds = run(nodes, reports(nodes, {"gpu-003": booted(ok("gpu-003"))}), state, cfg, NOW + 300, slurm, 1)
    assert [(d.node, d.reason) for d in ds if d.action == "drain"] == [("gpu-003", REASON)]
    latch = state.latch("gpu-003")
    assert latch is not None and not latch.in_service and latch.action == "reboot"
    assert [d for d in ds if d.action == "alert"] == []


def test_a_reboot_spends_an_in_service_latch():
    nodes = six_with_an_operator_drain()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    cfg = PolicyConfig(fatal_max_drains=0)
    run(nodes, reports(nodes, {"gpu-003": booted(xid("gpu-003"))}), state, cfg, NOW, slurm, 0)
    assert state.latch("gpu-003") is not None
    ds = run(nodes, reports(nodes, {"gpu-003": booted(ok("gpu-003"), "b2")}), state, cfg, NOW + 30, slurm, 0)
    assert state.latches == {} and [d for d in ds if d.action in ("hold", "alert", "drain")] == []


def test_the_fatal_allowance_never_bypasses_the_storm_rule():
    nodes = cluster(6)
    bad = {n: booted(xid(n)) for n in ["gpu-001", "gpu-003", "gpu-005"]}
    state = PolicyState()
    ds = decide(reports(nodes, bad), nodes, state, PolicyConfig(), NOW, guard_room=0)
    assert actions(ds, "drain") == [] and actions(ds, "hold") == []
    assert [d.code for d in ds if d.action == "alert"] == ["storm"]
    assert state.latches == {}


def test_fatal_drains_use_the_brake_first_and_the_allowance_beyond_it():
    nodes = cluster(64)
    names = list(nodes)
    bad = {names[i]: booted(xid(names[i], code, 0)) for i, code in enumerate([79, 48, 74, 95, 119])}
    cfg = PolicyConfig(max_drains=2, fatal_max_drains=2)
    state = PolicyState()
    ds = run(nodes, reports(nodes, bad), state, cfg, NOW, RecordingSlurm(nodes), None)
    assert actions(ds, "drain") == names[:4]
    assert [x.get("allowance") for x in state.drains] == ["brake", "brake", "fatal", "fatal"]
    assert actions(ds, "hold") == [names[4]] and state.latch(names[4]).in_service


def test_run_health_drains_the_xid79_node_past_the_real_guardrail(tmp_path: Path):
    """The whole pass: the guardrail's room comes from Slurm's view of the partition, and the
    shared guardrail (GuardedSlurm) lets the fatal drain through, audited as such."""
    from opsctl.audit import AuditLog
    from opsctl.checks.settings import HealthSection
    from opsctl.config import AuditSection, Config
    from opsctl.evidence.model import Evidence, XidEvent
    from opsctl.health import service

    class Source:
        name = "fake"

        def collect(self, nodes, now):
            out = []
            for n in nodes:
                ev = Evidence(n, "fake", now, gpu_count=8, provides=frozenset({"gpu_count", "xid"}),
                              boot_id="b1", xid_mode="count")
                ev.xids = [XidEvent(79, gpu=3, time=now)] if n == "gpu-003" else []
                out.append(ev)
            return out

    backend = InMemorySlurm()
    backend.drain(["gpu-002"], "opsctl:manual:operator hold")
    config = Config(sections={"audit": AuditSection(log=str(tmp_path / "audit.jsonl"))})
    h = HealthSection(state_file=str(tmp_path / "state.json"), decision_log=str(tmp_path / "d.jsonl"),
                      expected_gpus=8, required_checks=["gpu-count", "gpu-xid"])
    ctx = service.HealthContext(health=h, slurm=backend, config=config)  # type: ignore[arg-type]
    nodes = sorted(backend.all)
    res = service.run_health(ctx, nodes, Source(), remediate=True, now=NOW)
    (d,) = [d for d in res.decisions if d.action == "drain"]
    assert (d.node, d.reason, d.result) == ("gpu-003", REASON, "applied"), d
    assert backend.all["gpu-003"].reason == REASON
    assert backend.all["gpu-002"].reason == "opsctl:manual:operator hold"
    (line,) = AuditLog(tmp_path / "audit.jsonl").read()
    assert line["result"] == "applied" and "guardrail" in line["detail"]
    state = PolicyState.load(tmp_path / "state.json")
    assert state.latch("gpu-003").action == "reboot"
