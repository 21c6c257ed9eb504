"""Ownership of drains, latching until the fix is proven, escalation, hung probes, refusal, and
shadow mode's own state: the pure policy, plus run_health over a recording Slurm."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from test_policy import NOW, RecordingSlurm, actions, cluster, ok, reports

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.remediation.actions import act
from opsctl.remediation.policy import decide
from opsctl.remediation.proof import resume_proof
from opsctl.remediation.state import PolicyState
from opsctl.remediation.unknown import probe_verdicts, remediation_refusal

UUID = "GPU-5b8f6e2a-0000-0000-0000-000000000003"


def failing(node: str, code: str = "gpu-xid", action: str = "reboot", gpu: int | None = 3, boot: str = "b1",
            recovery: str | None = None, **evidence: object) -> NodeReport:
    v = Verdict(code, Status.FAIL, node, gpu, f"{code} {action}",
                {"short": f"{code} gpu {gpu}", "action": action, **evidence})
    return NodeReport(node, Status.FAIL, [v], boot_id=boot, gpu_uuids={3: UUID},
                      recovery={3: recovery} if recovery else {})


def clean(node: str, boot: str = "b1", recovery: str | None = None) -> NodeReport:
    r = ok(node)
    r.boot_id, r.gpu_uuids = boot, {3: UUID}
    if recovery:
        r.recovery = {3: recovery}
    return r


def run(nodes, reps, state, cfg, now, slurm, owner="health"):
    ds = decide(reps, nodes, state, cfg, now, owner=owner)
    act(ds, slurm, state, now, dry_run=False, shadow=False, owner=owner)
    return ds


@pytest.mark.parametrize(
    "reason",
    ["opsctl:manual:xid 79", "opsctl:watch:launch-node-failed:slurmd dead in run r1", "opsctl: old style",
     "opsctl:gpu-xid:xid 79 gpu 3", "opsctl:health:gpu-xid:xid 79 gpu 3"],
)
def test_health_never_resumes_a_drain_it_did_not_latch(reason):
    """Manual, watch and legacy drains, and a health-looking reason without a latch (typed by hand,
    or from another state file), stay drained through 10 clean passes."""
    nodes = cluster()
    nodes["gpu-002"].flags.add("DRAIN")
    nodes["gpu-002"].reason = reason
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    for i in range(10):
        ds = run(nodes, reports(nodes), state, PolicyConfig(resume_after_clean=1), NOW + 30 * i, slurm)
        assert actions(ds, "resume") == []
    assert slurm.calls == [] and nodes["gpu-002"].reason == reason


def test_reboot_class_waits_for_a_new_boot_id():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=2)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003")}), state, cfg, NOW, slurm)
    assert state.latch("gpu-003").action == "reboot" and state.latch("gpu-003").boot_id == "b1"
    for i in range(1, 6):  # clean, but the same boot: the GPU that fell off the bus was never reset
        ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003")}), state, cfg, NOW + 30 * i, slurm)
        (d,) = [d for d in ds if d.node == "gpu-003"]
        assert d.action == "keep"
    assert "boot id unchanged" in d.why
    ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot="b2")}), state, cfg, NOW + 300, slurm)
    assert actions(ds, "resume") == ["gpu-003"] and "rebooted" in ds[2].why
    assert [c[0] for c in slurm.calls] == ["drain", "resume"] and state.latches == {}


def test_reboot_class_without_boot_ids_is_never_resumed_automatically():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", boot="")}), state, PolicyConfig(), NOW, slurm)
    for i in range(1, 6):
        ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot="")}), state,
                 PolicyConfig(resume_after_clean=1), NOW + 30 * i, slurm)
        assert actions(ds, "resume") == []
    assert "no boot id" in next(d.why for d in ds if d.node == "gpu-003")


def test_reset_class_waits_for_the_driver_to_stop_asking_for_a_reset():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=1)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", "gpu-ecc-dbe", "reset_gpu", recovery="reset")}),
        state, cfg, NOW, slurm)
    latch = state.latch("gpu-003")
    assert latch.action == "reset_gpu" and latch.reset_seen and latch.gpu_uuid == UUID
    # clean checks but the driver still asks for a reset: keep
    ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", recovery="reset")}), state, cfg,
             NOW + 30, slurm)
    assert actions(ds, "resume") == []
    # the GPU was reset: the driver asks for nothing
    ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", recovery="none")}), state, cfg,
             NOW + 60, slurm)
    assert actions(ds, "resume") == ["gpu-003"]


def test_reset_class_without_evidence_of_a_reset_keeps_the_node():
    """No recovery action was ever reported: clean checks alone are no proof of a reset."""
    latch_node = failing("gpu-003", "gpu-ecc-dbe", "reset_gpu")
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": latch_node}), state, PolicyConfig(), NOW, slurm)
    proven, why = resume_proof(state.latch("gpu-003"), clean("gpu-003", recovery="none"))
    assert not proven and "reset" in why
    proven, why = resume_proof(state.latch("gpu-003"), clean("gpu-003", boot="b2"))
    assert proven  # a reboot resets every GPU


def test_driver_asking_for_a_reboot_raises_the_latch():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", "gpu-ecc-dbe", "reset_gpu")}), state,
        PolicyConfig(), NOW, slurm)
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", "gpu-ecc-dbe", "reset_gpu", recovery="reboot")}),
        state, PolicyConfig(), NOW + 30, slurm)
    assert state.latch("gpu-003").action == "reboot"


def test_replace_class_is_never_resumed_automatically():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", "gpu-row-remap", "replace")}), state,
        PolicyConfig(), NOW, slurm)
    for i in range(1, 5):
        ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot=f"b{i + 1}")}), state,
                 PolicyConfig(resume_after_clean=1), NOW + 30 * i, slurm)
        assert actions(ds, "resume") == []
    assert "replacement" in next(d.why for d in ds if d.node == "gpu-003")


def test_a_repeat_on_the_same_gpu_escalates_and_is_held():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=1, max_drains=5, max_fraction=1.0)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003")}), state, cfg, NOW, slurm)
    ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot="b2")}), state, cfg, NOW + 600, slurm)
    assert actions(ds, "resume") == ["gpu-003"]
    # the same GPU (by UUID) fails again a day later: drained, held for a person, alert
    ds = run(nodes, reports(nodes, {"gpu-003": failing("gpu-003", boot="b2")}), state, cfg,
             NOW + 86400, slurm)
    (drain,) = [d for d in ds if d.action == "drain"]
    assert drain.reason.endswith("repeat-held") and drain.result == "applied"
    (alert,) = [d for d in ds if d.action == "alert"]
    assert alert.code == "escalated" and alert.node == "gpu-003"
    for i in range(1, 4):  # rebooted and clean: still held
        ds = run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot=f"c{i}")}), state, cfg,
                 NOW + 86400 + 60 * i, slurm)
        assert actions(ds, "resume") == []
    # outside the window a new fault is a first fault again
    assert state.latch("gpu-003").escalated


def test_another_gpu_on_the_same_node_is_not_a_repeat():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=1, max_drains=5, max_fraction=1.0)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003")}), state, cfg, NOW, slurm)
    run(nodes, reports(nodes, {"gpu-003": clean("gpu-003", boot="b2")}), state, cfg, NOW + 600, slurm)
    other = failing("gpu-003", gpu=5, boot="b2", uuid="GPU-other")
    ds = run(nodes, reports(nodes, {"gpu-003": other}), state, cfg, NOW + 1200, slurm)
    (drain,) = [d for d in ds if d.action == "drain"]
    assert not drain.reason.endswith("repeat-held") and not [d for d in ds if d.code == "escalated"]


def test_a_person_resuming_a_latched_node_spends_the_latch():
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {"gpu-003": failing("gpu-003")}), state, PolicyConfig(), NOW, slurm)
    slurm.resume(["gpu-003"])  # an operator: `opsctl resume gpu-003`
    ds = run(nodes, reports(nodes), state, PolicyConfig(), NOW + 30, slurm)
    assert state.latches == {} and actions(ds, "drain") == []


def test_watch_drains_share_the_brake_with_health():
    nodes = cluster(64)
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(max_drains=1, fatal_max_drains=0)  # the brake alone
    state = PolicyState()
    failed = NodeReport("gpu-010", Status.FAIL, [Verdict("launch-node-failed", Status.FAIL, "gpu-010", None,
                                                         "slurmd dead", {"short": "slurmd dead in run r1"})])
    ds = run(nodes, [failed], state, cfg, NOW, slurm, owner="watch")
    assert nodes["gpu-010"].reason == "opsctl:watch:launch-node-failed:slurmd dead in run r1"
    assert state.latches == {}  # only health latches (and resumes)
    ds = run(nodes, reports(nodes, {"gpu-003": failing("gpu-003")}), state, cfg,
             NOW + 30, slurm)
    assert actions(ds, "hold") == ["gpu-003"] and actions(ds, "drain") == []


def test_probe_that_keeps_timing_out_fails_after_n_passes():
    cfg = PolicyConfig(probe_hung_passes=3)
    state = PolicyState()
    statuses = []
    for _ in range(3):
        r = NodeReport("gpu-001", Status.UNKNOWN,
                       [Verdict("mount", Status.UNKNOWN, "gpu-001", None, "responsiveness unknown")],
                       probe_timeouts=["mount:/lustre"])
        probe_verdicts(r, state, cfg, count=True)
        statuses.append(r.status)
    assert statuses == [Status.UNKNOWN, Status.UNKNOWN, Status.FAIL]
    (v,) = [v for v in r.verdicts if v.code == "probe-hung"]
    assert v.evidence["probe"] == "mount:/lustre" and v.evidence["passes"] == 3
    # the probe answers again: the streak is gone
    r = ok("gpu-001")
    probe_verdicts(r, state, cfg, count=True)
    assert r.status is Status.OK and state.probe_timeouts == {}


def test_an_unreadable_node_keeps_its_probe_streak():
    cfg = PolicyConfig(probe_hung_passes=2)
    state = PolicyState(probe_timeouts={"gpu-001": {"nvidia-smi": 1}})
    gone = NodeReport("gpu-001", Status.UNKNOWN, [Verdict("evidence", Status.UNKNOWN, "gpu-001", None, "x")])
    probe_verdicts(gone, state, cfg, count=True)
    assert state.probe_timeouts == {"gpu-001": {"nvidia-smi": 1}}


def test_refusal_in_last_value_mode_and_without_required_evidence():
    from opsctl.evidence.model import Evidence

    ev = Evidence("gpu-001", "prometheus", NOW, gpu_count=8, provides=frozenset({"gpu_count", "xid"}),
                  xids=[], xid_mode="last-value")
    assert "last value" in remediation_refusal([ev], ["gpu-xid"])
    ev.xid_mode = "count"
    assert remediation_refusal([ev], ["gpu-xid"]) == ""
    assert "gpu-ecc-dbe" in remediation_refusal([ev], ["gpu-xid", "gpu-ecc-dbe"])
    # nothing readable: every node is UNKNOWN, there is nothing to refuse
    gone = Evidence("gpu-001", "prometheus", NOW, reachable=False)
    assert remediation_refusal([gone], ["gpu-xid", "gpu-ecc-dbe"]) == ""


@dataclass
class _Node:
    name: str
    state: str = "idle"
    reason: str = ""
    flags: set[str] = field(default_factory=set)
    partitions: list[str] = field(default_factory=lambda: ["gpu"])

    @property
    def drain_flag(self) -> bool:
        return "DRAIN" in self.flags


class _Backend:
    def __init__(self, names: list[str]) -> None:
        self._nodes = {n: _Node(n) for n in names}
        self.changed = 0

    def nodes(self, names):
        return [n for n in self._nodes.values() if names is None or n.name in names]

    def drain(self, names, reason):  # pragma: no cover - shadow mode must never get here
        self.changed += 1

    def resume(self, names):  # pragma: no cover
        self.changed += 1


class _Source:
    name = "fake"

    def __init__(self) -> None:
        self.fault = True
        self.boot = "b1"

    def collect(self, nodes, now):
        from opsctl.evidence.model import Evidence, XidEvent

        out = []
        for n in nodes:
            ev = Evidence(n, "fake", now, gpu_count=8, provides=frozenset({"gpu_count", "xid"}),
                          boot_id=self.boot, xid_mode="count")
            ev.xids = [XidEvent(79, gpu=3, time=now)] if self.fault and n == "gpu-002" else []
            out.append(ev)
        return out


def test_shadow_mode_keeps_its_own_state_and_shows_drain_keep_resume(tmp_path):
    from opsctl.checks.settings import HealthSection
    from opsctl.health import service

    h = HealthSection(shadow=True, resume_after_clean=2, state_file=str(tmp_path / "state.json"),
                      decision_log=str(tmp_path / "d.jsonl"), expected_gpus=8,
                      required_checks=["gpu-count", "gpu-xid"])
    backend = _Backend(["gpu-001", "gpu-002", "gpu-003"])
    ctx = service.HealthContext(health=h, slurm=backend, config=None)  # type: ignore[arg-type]
    src = _Source()
    nodes = ["gpu-001", "gpu-002", "gpu-003"]

    def step(t: float) -> list[str]:
        res = service.run_health(ctx, nodes, src, remediate=True, now=NOW + t)
        assert res.mode == "shadow"
        return [f"{d.action}:{d.result}" for d in res.decisions if d.node == "gpu-002"]

    assert step(0) == ["drain:shadow"]
    assert step(30) == ["keep:noop"]  # the shadow drain is remembered: not drained twice
    src.fault = False
    assert step(60) == ["keep:noop"]  # clean 1/2
    assert step(90) == ["keep:noop"]  # clean 2/2, but the same boot: XID 79 needs a reboot
    src.boot = "b2"
    assert step(120) == ["resume:shadow"]
    assert backend.changed == 0 and not (tmp_path / "state.json").exists()
    assert (tmp_path / "state.shadow.json").exists()


def test_state_lock_excludes_a_second_process(tmp_path):
    """While one process holds the state lock, another cannot take it (flock across processes)."""
    import subprocess
    import sys

    from opsctl.remediation.state import locked

    path = tmp_path / "state.json"
    probe = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(path) + '.lock'!r}, os.O_RDWR)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(7)\n"
    )
    with locked(path):
        held = subprocess.run([sys.executable, "-c", probe], check=False)
    free = subprocess.run([sys.executable, "-c", probe], check=False)
    assert (held.returncode, free.returncode) == (7, 0)


class _DiagSource:
    """DCGM verdicts as the dcgm source gives them: a failing diagnostic on one node."""

    name = "dcgm"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def collect(self, nodes, now):
        from opsctl.evidence.model import Evidence

        self.asked += nodes
        out = []
        for n in nodes:
            ev = Evidence(n, "dcgm", now, provides=frozenset({"dcgm"}))
            ev.dcgm_incidents = (
                [{"gpu": 3, "system": "diag memory", "status": "Fail", "message": "DBE in memtest"}]
                if n == "gpu-002" else []
            )
            out.append(ev)
        return out


def test_diag_before_resume_keeps_a_node_whose_diagnostic_fails_and_waits_for_idle():
    from opsctl.checks.settings import HealthSection
    from opsctl.remediation.passes import diag_before_resume
    from opsctl.remediation.policy import Decision

    health = HealthSection(resume_diag_level=1)
    view = {n: _Node(n, state, "r", {"DRAIN"})
            for n, state in (("gpu-001", "idle"), ("gpu-002", "idle"), ("gpu-003", "allocated"))}
    ds = [Decision(n, "resume", "clean 3/3 passes") for n in view]
    src = _DiagSource()
    diag_before_resume(health, ds, view, NOW, source=src)
    got = {d.node: (d.action, d.why) for d in ds}
    assert src.asked == ["gpu-001", "gpu-002"]  # never on a node still running work
    assert got["gpu-001"][0] == "resume" and "diag -r 1 passed" in got["gpu-001"][1]
    assert got["gpu-002"][0] == "keep" and "DBE in memtest" in got["gpu-002"][1]
    assert got["gpu-003"][0] == "keep" and "idle" in got["gpu-003"][1]


def test_the_xid_a_proven_reset_dealt_with_does_not_hold_the_node():
    """After `nvidia-smi -r` the XID 48 stays in the exporter's count window, but the driver no longer
    asks for a reset: that XID is history; any other failure still holds the node."""
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=2)
    state = PolicyState()
    dbe = failing("gpu-003", "gpu-xid", "reset_gpu", recovery="reset", xid=48)
    run(nodes, reports(nodes, {"gpu-003": dbe}), state, cfg, NOW, slurm)
    after_reset = failing("gpu-003", "gpu-xid", "reset_gpu", recovery="none", xid=48)
    still_hot = failing("gpu-003", "gpu-xid", "reset_gpu", recovery="none", xid=48)
    still_hot.verdicts.append(
        Verdict("gpu-throttle", Status.FAIL, "gpu-003", 3, "thermal", {"action": "restart_app"})
    )
    ds = run(nodes, reports(nodes, {"gpu-003": still_hot}), state, cfg, NOW + 30, slurm)
    assert [d.action for d in ds if d.node == "gpu-003"] == ["keep"] and "still failing" in ds[2].why
    seen = []
    for i in range(2):
        ds = run(nodes, reports(nodes, {"gpu-003": after_reset}), state, cfg, NOW + 60 + 30 * i, slurm)
        seen += [d.action for d in ds if d.node == "gpu-003"]
    assert seen == ["keep", "resume"]
    # the same XID without a reset proof (the driver still asks) holds it
    state2 = PolicyState()
    nodes2 = cluster()
    slurm2 = RecordingSlurm(nodes2)
    run(nodes2, reports(nodes2, {"gpu-003": dbe}), state2, cfg, NOW, slurm2)
    for i in range(3):
        ds = run(nodes2, reports(nodes2, {"gpu-003": dbe}), state2, cfg, NOW + 30 * (i + 1), slurm2)
        assert actions(ds, "resume") == []
