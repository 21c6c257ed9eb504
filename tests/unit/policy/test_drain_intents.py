"""One Slurm read per pass, and drains recorded as intents before scontrol runs (issue 20, item 7).

A pass reads the nodes (and the jobs on them) once and hands that snapshot to every step. A drain's
intent (node, reason, signature, latch) is saved in the state before Slurm is asked; a drain whose
command timed out after slurmctld applied it, or whose audit line could not be written, is
"unconfirmed", and the next pass finds it drained with our reason and latches it ("reconciled").
An intent whose node is not drained is dropped once, and policy decides afresh."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_policy import NOW

from opsctl.audit import AuditLog
from opsctl.checks.settings import HealthSection
from opsctl.config import AuditSection, Config
from opsctl.errors import ConfigError, OpsctlError, Unreachable
from opsctl.evidence.model import Evidence, XidEvent
from opsctl.health import service
from opsctl.model import Node
from opsctl.remediation.state import PolicyState

REASON = "opsctl:health:gpu-xid:xid 79 gpu 3"


class Backend:
    """Six idle nodes; counts node reads; ``drain_then`` decides what a drain does after (or
    instead of) applying: "ok", "timeout" (applied, then no answer), "lost" (no answer, not applied)."""

    def __init__(self, drain_then: str = "ok") -> None:
        self.all = {f"gpu-{i:03d}": Node(f"gpu-{i:03d}", "idle", partitions=["gpu"]) for i in range(1, 7)}
        self.reads = 0
        self.drains: list[str] = []
        self.drain_then = drain_then
        self.on_drain = lambda: None

    def nodes(self, names):
        self.reads += 1
        return [Node(n.name, n.state, set(n.flags), n.reason, partitions=list(n.partitions))
                for n in self.all.values() if names is None or n.name in names]

    def drain(self, names, reason):
        self.on_drain()
        self.drains.extend(names)
        if self.drain_then != "lost":
            for n in names:
                self.all[n].flags.add("DRAIN")
                self.all[n].reason = reason
        if self.drain_then in ("timeout", "lost"):
            raise Unreachable("scontrol timed out after 30s (is slurmctld up?)")

    def resume(self, names):  # pragma: no cover - nothing resumes here
        raise AssertionError(names)


class Source:
    name = "fake"

    def __init__(self, failing: str = "gpu-003") -> None:
        self.failing = failing

    def collect(self, nodes, now):
        out = []
        for n in nodes:
            ev = Evidence(n, "fake", now, gpu_count=8, provides=frozenset({"gpu_count", "xid"}),
                          boot_id="b1", xid_mode="count")
            ev.xids = [XidEvent(79, gpu=3, time=now)] if n == self.failing else []
            out.append(ev)
        return out


def context(tmp_path: Path, backend: Backend) -> service.HealthContext:
    config = Config(sections={"audit": AuditSection(log=str(tmp_path / "audit.jsonl"))})
    h = HealthSection(state_file=str(tmp_path / "state.json"), decision_log=str(tmp_path / "d.jsonl"),
                      expected_gpus=8, required_checks=["gpu-count", "gpu-xid"], max_fraction=1.0)
    return service.HealthContext(health=h, slurm=backend, config=config)  # type: ignore[arg-type]


def one_pass(ctx: service.HealthContext, now: float = NOW) -> service.HealthResult:
    """As the service runs it: the node set from Slurm, then the pass on that read."""
    targets = service.pass_nodes(ctx, None)
    return service.run_health(ctx, targets.names, Source(), remediate=True, now=now, slurm=targets.slurm)


def of(result: service.HealthResult, node: str) -> list[tuple[str, str]]:
    return [(d.action, d.result) for d in result.decisions if d.node == node]


def state(tmp_path: Path) -> PolicyState:
    return PolicyState.load(tmp_path / "state.json")


def test_a_pass_that_drains_reads_the_nodes_once(tmp_path):
    backend = Backend()
    ctx = context(tmp_path, backend)
    first = one_pass(ctx)
    assert of(first, "gpu-003") == [("drain", "applied")]
    assert backend.reads == 1  # the node set, the view, the partition, the guardrail: one read
    # the snapshot the pass hands on (to the service's gauges) shows its own drain
    assert first.slurm is not None
    assert [n.display_state for n in first.slurm.nodes if n.name == "gpu-003"] == ["drained"]
    backend.reads = 0
    assert of(one_pass(ctx, NOW + 10), "gpu-003") == [("keep", "noop")]
    assert backend.reads == 1


def test_a_snapshot_read_before_another_process_drained_is_read_again(tmp_path):
    """The watcher (or another `health --remediate`) drained between this pass's read and its lock:
    the state's change count moved, so the pass reads Slurm again rather than take the node it
    latched for undrained (and drain it twice)."""
    backend = Backend()
    ctx = context(tmp_path, backend)
    one_pass(ctx)
    targets = service.pass_nodes(ctx, None)  # read before collecting
    backend.reads = 0
    # meanwhile another process drains gpu-005 and records it
    other = state(tmp_path)
    other.slurm_changes += 1
    other.save(tmp_path / "state.json")
    backend.all["gpu-005"].flags.add("DRAIN")
    backend.all["gpu-005"].reason = "opsctl:watch:launch-node-failed:x in run r"
    res = service.run_health(ctx, targets.names, Source(), remediate=True, now=NOW + 10, slurm=targets.slurm)
    assert backend.reads == 1
    assert res.slurm is not None and "DRAIN" in {f for n in res.slurm.nodes if n.name == "gpu-005"
                                                   for f in n.flags}
    assert of(res, "gpu-003") == [("keep", "noop")]


def test_the_intent_is_saved_before_scontrol_runs(tmp_path):
    backend = Backend()
    seen: list[dict[str, object]] = []
    backend.on_drain = lambda: seen.append(json.loads((tmp_path / "state.json").read_text())["intents"])
    one_pass(context(tmp_path, backend))
    assert list(seen[0]) == ["gpu-003"] and seen[0]["gpu-003"]["reason"] == REASON
    assert seen[0]["gpu-003"]["latch"]["action"] == "reboot"
    assert state(tmp_path).intents == {}  # confirmed: latched instead
    assert state(tmp_path).latch("gpu-003") is not None


def test_a_drain_that_timed_out_after_slurm_applied_it_is_latched_on_the_next_pass(tmp_path):
    backend = Backend(drain_then="timeout")
    ctx = context(tmp_path, backend)
    first = one_pass(ctx)
    (d,) = [d for d in first.decisions if d.node == "gpu-003"]
    assert (d.action, d.result) == ("drain", "unconfirmed") and "timed out" in d.why, d
    assert "may have applied" in d.why
    s = state(tmp_path)
    assert s.latch("gpu-003") is None and s.intents["gpu-003"]["reason"] == REASON
    assert backend.all["gpu-003"].reason == REASON  # slurmctld applied it

    backend.drain_then = "ok"
    second = one_pass(ctx, NOW + 10)
    assert of(second, "gpu-003") == [("drain", "reconciled"), ("keep", "noop")]
    s = state(tmp_path)
    assert s.intents == {} and s.latch("gpu-003").action == "reboot"
    assert [x["node"] for x in s.drains] == ["gpu-003"]  # counted against the brake once
    assert backend.drains == ["gpu-003"]  # never asked again
    audit = [(x["action"], x["result"]) for x in AuditLog(tmp_path / "audit.jsonl").read()]
    assert audit == [("drain", "failed"), ("drain", "reconciled")]
    assert of(one_pass(ctx, NOW + 20), "gpu-003") == [("keep", "noop")]


def test_an_intent_whose_node_is_not_drained_is_dropped_once_and_policy_drains_again(tmp_path):
    backend = Backend(drain_then="lost")
    ctx = context(tmp_path, backend)
    assert of(one_pass(ctx), "gpu-003") == [("drain", "unconfirmed")]
    assert "DRAIN" not in backend.all["gpu-003"].flags
    backend.drain_then = "ok"
    second = one_pass(ctx, NOW + 10)
    assert of(second, "gpu-003") == [("drain", "dropped"), ("drain", "applied")]
    assert "not drained" in second.decisions[0].why
    s = state(tmp_path)
    assert s.intents == {} and s.latch("gpu-003") is not None
    assert [x["node"] for x in s.drains] == ["gpu-003"]


def test_an_intent_on_a_node_someone_else_drained_since_is_dropped(tmp_path):
    backend = Backend(drain_then="lost")
    ctx = context(tmp_path, backend)
    one_pass(ctx)
    backend.all["gpu-003"].flags.add("DRAIN")
    backend.all["gpu-003"].reason = "RMA 4711"
    second = one_pass(ctx, NOW + 10)
    assert of(second, "gpu-003") == [("drain", "dropped"), ("none", "noop")]
    assert state(tmp_path).latch("gpu-003") is None and state(tmp_path).intents == {}


def test_a_drain_whose_audit_line_failed_is_unconfirmed_not_failed(tmp_path, monkeypatch):
    real = AuditLog.append

    def append(self, record):
        if record.result == "applied":
            raise ConfigError(f"audit log {self.path} is not writable: No space left on device")
        real(self, record)

    monkeypatch.setattr(AuditLog, "append", append)
    backend = Backend()
    ctx = context(tmp_path, backend)
    (d,) = [d for d in one_pass(ctx).decisions if d.node == "gpu-003"]
    assert d.result == "unconfirmed" and "not audited" in d.why, d
    monkeypatch.setattr(AuditLog, "append", real)
    assert of(one_pass(ctx, NOW + 10), "gpu-003") == [("drain", "reconciled"), ("keep", "noop")]
    assert [x["result"] for x in AuditLog(tmp_path / "audit.jsonl").read()] == ["reconciled"]


def test_a_decision_log_that_fails_after_a_drain_says_slurm_was_changed(tmp_path):
    backend = Backend()
    ctx = context(tmp_path, backend)
    (tmp_path / "d.jsonl").mkdir()  # the decision log cannot be opened
    with pytest.raises(OpsctlError) as err:
        one_pass(ctx)
    assert err.value.exit_code == 3, err.value  # not 2: "nothing was applied"
    assert "Slurm was changed" in str(err.value) and "drain gpu-003 (applied)" in str(err.value)
    assert state(tmp_path).latch("gpu-003") is not None  # the state was saved before the log
