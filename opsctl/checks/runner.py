"""Judge: run the catalogue over every node's evidence and roll verdicts up per node."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opsctl.checks.catalogue import CATALOGUE
from opsctl.checks.model import Status, Verdict, worst
from opsctl.checks.thresholds import Thresholds
from opsctl.evidence.model import Evidence
from opsctl.nodeset import node_sorted


@dataclass
class NodeReport:
    node: str
    status: Status
    verdicts: list[Verdict] = field(default_factory=list)
    source: str = ""
    # facts remediation latches on (not judgements): the kernel boot, each GPU's UUID and what the
    # driver says it needs, the XID mode and the probes that hung in this pass
    boot_id: str = ""
    boot_kind: str = ""  # Evidence.boot_kind: "kernel" or "btime" ("": say it by the id's form)
    boot_time: float | None = None  # the current boot's start (unix seconds), when known
    gpu_uuids: dict[int, str] = field(default_factory=dict)
    recovery: dict[int, str] = field(default_factory=dict)  # gpu -> recovery action, where known
    xid_mode: str = ""
    probe_timeouts: list[str] = field(default_factory=list)
    # when the evidence was observed (Evidence.observed_at, else its collection); None: unknown
    observed_at: float | None = None

    @property
    def problems(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status is not Status.OK]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status.value,
            "source": self.source,
            "verdicts": [v.to_json() for v in self.verdicts],
            "boot_id": self.boot_id,
            "boot_kind": self.boot_kind,
            "xid_mode": self.xid_mode,
        }


def judge_node(ev: Evidence, th: Thresholds, now: float) -> NodeReport:
    if not ev.reachable:
        # No facts at all: one UNKNOWN, never a reason to drain.
        v = Verdict(
            "evidence",
            Status.UNKNOWN,
            ev.node,
            None,
            ev.error or "no evidence",
            {"source": ev.source, "short": "no evidence"},
        )
        return NodeReport(
            ev.node, Status.UNKNOWN, [v], ev.source, boot_id=ev.boot_id, boot_kind=ev.boot_kind,
            boot_time=ev.boot_time,
        )
    verdicts: list[Verdict] = []
    for check in CATALOGUE:
        if check.fact not in ev.provides:
            continue
        verdicts.extend(check.fn(ev, th, now))
    return NodeReport(
        ev.node,
        worst([v.status for v in verdicts]),
        verdicts,
        ev.source,
        boot_id=ev.boot_id,
        boot_kind=ev.boot_kind,
        boot_time=ev.boot_time,
        gpu_uuids={g.index: g.uuid for g in ev.gpus if g.uuid},
        recovery={
            g.index: g.recovery_action if g.recovery_action is not None else
            ("reset" if g.reset_required else "none")
            for g in ev.gpus
            if g.recovery_action is not None or g.reset_required is not None
        },
        xid_mode=ev.xid_mode,
        probe_timeouts=list(ev.probe_timeouts),
        observed_at=ev.collected_at if ev.observed_at is None else ev.observed_at,
    )


def judge(evidence: Iterable[Evidence], th: Thresholds, now: float) -> list[NodeReport]:
    # node-set order (node2 before node10): the order every report, table and JSON lists nodes in
    return [judge_node(ev, th, now) for ev in node_sorted(evidence, key=lambda e: e.node)]
