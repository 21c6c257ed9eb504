"""A storm holds only the drains of its own signature (check code, plus the XID for XID failures).

One fleet-wide false FAIL (an Ethernet port judged as ib-port, a Lustre outage) must not stop the
drain of a node that also fails a check outside the storm: that node is drained as usual, for that
check, within the brake. A node whose only FAILs are storm signatures is held."""

from __future__ import annotations

from dataclasses import dataclass, field

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.remediation.actions import act
from opsctl.remediation.policy import decide
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
    def __init__(self, nodes: dict[str, FakeNode]) -> None:
        self.nodes = nodes
        self.calls: list[tuple[str, str]] = []

    def drain(self, names, reason):
        for n in names:
            self.calls.append((n, reason))
            self.nodes[n].flags.add("DRAIN")
            self.nodes[n].reason = reason

    def resume(self, names):  # pragma: no cover - nothing resumes here
        raise AssertionError(f"unexpected resume of {names}")


def cluster(n: int = 8) -> dict[str, FakeNode]:
    return {f"gpu-{i:03d}": FakeNode(f"gpu-{i:03d}") for i in range(1, n + 1)}


def ib_port(node: str) -> Verdict:
    return Verdict("ib-port", Status.FAIL, node, None, "mlx5_0/1: state DOWN", {"short": "mlx5_0 state DOWN"})


def xid(node: str, code: int = 79, gpu: int = 3) -> Verdict:
    return Verdict(
        "gpu-xid", Status.FAIL, node, gpu, f"xid {code}", {"xid": code, "short": f"xid {code} gpu {gpu}"}
    )


def report(node: str, *verdicts: Verdict) -> NodeReport:
    return NodeReport(node, Status.FAIL, list(verdicts))


def ib_storm(nodes, extra: dict[str, list[Verdict]] | None = None) -> list[NodeReport]:
    """ib-port FAIL on every node, plus ``extra`` verdicts on some."""
    extra = extra or {}
    return [report(n, ib_port(n), *extra.get(n, [])) for n in nodes]


def by_action(decisions, action):
    return [d for d in decisions if d.action == action]


def test_ib_port_storm_everywhere_still_drains_the_xid79_node_for_its_xid():
    nodes = cluster(8)
    reps = ib_storm(nodes, {"gpu-005": [xid("gpu-005")]})
    ds = decide(reps, nodes, PolicyState(), PolicyConfig(), NOW)

    (drain,) = by_action(ds, "drain")
    assert drain.node == "gpu-005"
    assert drain.reason == "opsctl:health:gpu-xid:xid 79 gpu 3"  # names its own check, not the storm's
    assert drain.code == "gpu-xid" and drain.signature == "gpu-xid:xid79"
    assert drain.latch["action"] == "reboot" and drain.latch["gpu"] == 3
    # every other node fails only the storm's signature: held, not drained
    others = [d for d in ds if d.node != "gpu-005" and d.action != "alert"]
    assert sorted(d.node for d in others) == [n for n in nodes if n != "gpu-005"]
    assert all(d.action == "none" and "storm" in d.why and "ib-port" in d.why for d in others)
    # the alert names the storm's signature only
    (alert,) = by_action(ds, "alert")
    assert alert.code == "storm" and alert.signature == "ib-port"
    assert alert.node == "gpu-[001-008]" and "ib-port" in alert.why
    assert "gpu-xid" not in alert.why and "xid79" not in alert.why


def test_a_node_failing_only_the_storm_signature_is_not_drained_even_with_budget_left():
    nodes = cluster(8)
    cfg = PolicyConfig(max_drains=8, max_fraction=1.0)
    ds = decide(ib_storm(nodes), nodes, PolicyState(), cfg, NOW)
    assert by_action(ds, "drain") == [] and by_action(ds, "hold") == []
    assert [(d.code, d.signature) for d in by_action(ds, "alert")] == [("storm", "ib-port")]


def test_an_xid_storm_does_not_hold_another_xid_on_one_of_its_nodes():
    """The XID is part of the signature: a storm of XID 79 holds XID 79 drains, not an XID 48."""
    nodes = cluster(8)
    reps = [report(n, xid(n)) for n in list(nodes)[:4]]
    reps[1] = report("gpu-002", xid("gpu-002"), xid("gpu-002", 48, 1))
    ds = decide(reps, nodes, PolicyState(), PolicyConfig(), NOW)
    (drain,) = by_action(ds, "drain")
    assert drain.node == "gpu-002" and drain.reason == "opsctl:health:gpu-xid:xid 48 gpu 1"
    assert drain.signature == "gpu-xid:xid48"
    (alert,) = by_action(ds, "alert")
    assert alert.signature == "gpu-xid:xid79" and alert.node == "gpu-[001-004]"
    assert "xid48" not in alert.why


def test_drains_outside_a_storm_count_against_the_brake():
    nodes = cluster(8)
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    cfg = PolicyConfig(max_drains=2, max_fraction=1.0, fatal_max_drains=0)  # the brake alone
    # three different XIDs (no XID storm) under an ib-port storm on every node
    extra = {n: [xid(n, code)] for n, code in (("gpu-003", 79), ("gpu-005", 48), ("gpu-007", 94))}
    ds = decide(ib_storm(nodes, extra), nodes, state, cfg, NOW)
    act(ds, slurm, state, NOW, dry_run=False, shadow=False)
    assert [d.node for d in by_action(ds, "drain")] == ["gpu-003", "gpu-005"]
    (held,) = by_action(ds, "hold")
    assert held.node == "gpu-007" and held.reason.startswith("opsctl:health:gpu-xid:xid 94")
    assert sorted(d.code for d in by_action(ds, "alert")) == ["fatal-held", "storm"]  # an XID: paged
    assert [n for n, _ in slurm.calls] == ["gpu-003", "gpu-005"]
    assert [d["signature"] for d in state.drains] == ["gpu-xid:xid79", "gpu-xid:xid48"]
    # the next pass: the budget is spent, gpu-007 is still held by the brake, not by the storm
    ds = decide(ib_storm(nodes, extra), nodes, state, cfg, NOW + 30)
    assert by_action(ds, "drain") == [] and [d.node for d in by_action(ds, "hold")] == ["gpu-007"]
    assert {d.node: d.action for d in ds if d.node in ("gpu-003", "gpu-005")} == {
        "gpu-003": "keep",
        "gpu-005": "keep",
    }
