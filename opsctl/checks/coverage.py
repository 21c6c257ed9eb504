"""Which checks of the catalogue a source's evidence can evaluate, and on which nodes.

A check has evidence on a node when the node was read and the fact it needs is there (for a
per-GPU fact: on every GPU). Over the fleet a check is covered on ``all`` nodes, on ``some`` (the
others are listed), or on ``none``: no source gave it for any node. Remediation needs the required
checks (``[health] required_checks``) covered somewhere: a required check with no evidence at all
means the pass cannot see that class of fault, so it must not act (``missing_required``). Nor
should it act when a node's XIDs are known only as the last value per GPU (``last_value_xids``):
a later harmless XID hides a fatal one.

Pure: evidence in, a :class:`Coverage` out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opsctl.checks.catalogue import CATALOGUE
from opsctl.evidence.model import Evidence, GpuEvidence
from opsctl.nodeset import node_sorted

_GpuFact = Callable[[GpuEvidence], bool]

# Per-GPU facts: what each check needs on a GPU to give a verdict other than UNKNOWN.
_GPU_FACTS: dict[str, _GpuFact] = {
    "ecc": lambda g: g.ecc_dbe_volatile is not None,
    "ecc_sbe_rate": lambda g: g.ecc_sbe_per_hour is not None,
    # Ampere and later remap rows instead of retiring pages: either answers the check
    "retired_pages": lambda g: any(
        v is not None
        for v in (g.retired_pages_dbe, g.retired_pages_pending, g.remap_failure, g.remap_pending)
    ),
    "row_remap": lambda g: g.remap_failure is not None or g.remap_pending is not None,
    "nvlink": lambda g: g.nvlink_links_down is not None,
    "nvlink_crc": lambda g: g.nvlink_crc_per_second is not None,
    "pcie": lambda g: g.pcie_gen is not None and g.pcie_width is not None,
    "throttle": lambda g: g.thermal_throttle is not None or g.power_throttle is not None,
    "recovery": lambda g: g.recovery_action is not None or g.reset_required is not None,
}
# Node-level facts.
_NODE_FACTS: dict[str, Callable[[Evidence], bool]] = {
    "gpu_count": lambda ev: ev.gpu_count is not None,
    "xid": lambda ev: ev.xids is not None,
    "ib": lambda ev: ev.ib_ports is not None,
    "ib_errors": lambda ev: (
        ev.ib_ports is not None and all(p.counter_deltas is not None for p in ev.ib_ports)
    ),
    "mounts": lambda ev: ev.mounts is not None,
    "slurmd": lambda ev: ev.slurmd_alive is not None,
    "lustre": lambda ev: ev.lustre is not None,
    "dcgm": lambda ev: ev.dcgm_incidents is not None,
}


def has_fact(ev: Evidence, fact: str) -> bool:
    """Whether ``ev`` holds ``fact`` for its node (a fact the source does not provide: no)."""
    if not ev.reachable or fact not in ev.provides:
        return False
    gpu_fact = _GPU_FACTS.get(fact)
    if gpu_fact is not None:
        if not ev.gpus:
            return ev.gpu_count == 0  # nothing to evaluate on a node without GPUs
        return all(gpu_fact(g) for g in ev.gpus)
    node_fact = _NODE_FACTS.get(fact)
    # a fact this module does not know: trust the source's claim that it provides it
    return node_fact(ev) if node_fact is not None else True


@dataclass
class CheckCoverage:
    code: str
    fact: str
    title: str
    required: bool
    status: str  # all | some | none
    lacking: list[str] = field(default_factory=list)  # nodes without evidence (status "some")
    provided: bool = False  # the source reports this fact at all (for some node, in this collection)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "fact": self.fact,
            "title": self.title,
            "required": self.required,
            "status": self.status,
            "lacking": self.lacking,
            "provided": self.provided,
        }


@dataclass
class Coverage:
    nodes: list[str]
    checks: list[CheckCoverage]
    xid_modes: dict[str, list[str]]  # XID mode -> nodes ("none": the node's XIDs are unknown)
    missing_required: list[str]  # required checks no node has evidence for
    # node -> required checks it lacks evidence for (UNKNOWN there this pass)
    nodes_lacking_required: dict[str, list[str]]
    last_value_xids: bool  # some node's XIDs are only the last value per GPU

    @property
    def ok(self) -> bool:
        return not self.missing_required

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "nodes": len(self.nodes),
            "checks": [c.to_json() for c in self.checks],
            "xid_modes": self.xid_modes,
            "missing_required": self.missing_required,
            "nodes_lacking_required": self.nodes_lacking_required,
            "last_value_xids": self.last_value_xids,
        }


def coverage(evidence: Sequence[Evidence], required: Sequence[str]) -> Coverage:
    nodes = node_sorted(ev.node for ev in evidence)
    want = set(required)
    provided = frozenset().union(*(ev.provides for ev in evidence if ev.reachable))
    checks: list[CheckCoverage] = []
    for check in CATALOGUE:
        lacking = node_sorted(ev.node for ev in evidence if not has_fact(ev, check.fact))
        status = "none" if len(lacking) == len(nodes) else ("some" if lacking else "all")
        checks.append(
            CheckCoverage(
                check.code,
                check.fact,
                check.title,
                check.code in want,
                status,
                lacking if status == "some" else [],
                check.fact in provided,
            )
        )
    modes: dict[str, list[str]] = {}
    for ev in node_sorted(evidence, key=lambda e: e.node):
        mode = (ev.xid_mode or "unspecified") if ev.reachable and ev.xids is not None else "none"
        modes.setdefault(mode, []).append(ev.node)
    by_node: dict[str, list[str]] = {}
    for c in checks:
        if c.required and c.status == "some":
            for node in c.lacking:
                by_node.setdefault(node, []).append(c.code)
    return Coverage(
        nodes=nodes,
        checks=checks,
        xid_modes=modes,
        missing_required=[c.code for c in checks if c.required and c.status == "none"],
        nodes_lacking_required=by_node,
        last_value_xids="last-value" in modes,
    )


def render_text(cov: Coverage, source: str) -> str:
    """The human report of ``opsctl health --coverage``."""
    lines = [f"evidence coverage of source {source} on {len(cov.nodes)} nodes (* = required)"]
    width = max(len(c.code) for c in cov.checks) + 2
    for c in cov.checks:
        if c.status == "all":
            what = "all nodes"
        elif c.status == "none":
            what = "no node has it now" if c.provided else "not provided by this source"
        else:
            have = len(cov.nodes) - len(c.lacking)
            what = f"{have}/{len(cov.nodes)} nodes; lacking: {_short(c.lacking)}"
        lines.append(f"  {(c.code + (' *' if c.required else '')):<{width}} {c.fact:<14} {what}")
    modes = "; ".join(f"{mode} on {_short(nodes)}" for mode, nodes in cov.xid_modes.items())
    lines.append(f"XID mode: {modes}")
    if cov.last_value_xids:
        lines.append(
            "  last-value: only the last XID per GPU is known, so a later harmless XID hides a fatal "
            "one; remediation refuses to act (enable DCGM_EXP_XID_ERRORS_COUNT in the dcgm-exporter "
            "counters, or read the kernel log: --source prometheus+ssh)"
        )
    recovery = next((c for c in cov.checks if c.fact == "recovery"), None)
    if recovery is not None and recovery.status != "all" and "prometheus" in source.split("+"):
        where = "any node" if recovery.status == "none" else _short(recovery.lacking)
        lines.append(
            "  recovery action: DCGM field 1523 (DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION from DCGM 4.5, "
            "DCGM_FI_DEV_GPU_RECOVERY_ACTION from 4.6, where dcgm-exporter's counters file lists it) "
            f"is not served on {where}: gpu-recovery cannot judge there, and an XID 154 counted there "
            "takes the catalogue's class (reset_gpu), not the action the driver names"
        )
    if cov.missing_required:
        lines.append(f"required checks without evidence: {', '.join(cov.missing_required)}")
    else:
        lines.append("every required check has evidence")
    return "\n".join(lines)


def _short(nodes: list[str], limit: int = 8) -> str:
    shown = ", ".join(nodes[:limit])
    return shown + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")
