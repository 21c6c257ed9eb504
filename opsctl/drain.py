"""Drain and resume with guardrails: blast-radius brake, ownership of drains, audit trail.

Planning is pure (nodes in, plan out); `apply_drain`/`apply_resume` are the only functions that
change the cluster, and they record every outcome (applied, dry-run, refused, failed) in the audit
log before returning or raising.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from opsctl.audit import AuditLog, AuditRecord
from opsctl.config import GuardrailsSection
from opsctl.errors import ConfigError, OpsctlError, Refused, UsageError
from opsctl.model import Node, drain_owner, owned_reason
from opsctl.nodeset import fold
from opsctl.slurm.base import SlurmBackend, select_nodes

MAX_REASON_LEN = 200
# Reasons travel to scontrol as one argv element, never through a shell; still, refuse anything a
# shell or Slurm's own parsers would treat specially, so a reason is plain text wherever it goes.
_REASON_RE = re.compile(r"^[A-Za-z0-9 .,:_/@%+=-]+$")


def validate_reason(text: str) -> str:
    """The user's reason, stripped; UsageError if empty, too long or not plain text."""
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError("reason contains control characters (newlines, tabs)")
    reason = " ".join(text.split())
    if not reason:
        raise UsageError("empty reason: say why the node is drained (--reason TEXT)")
    if len(reason) > MAX_REASON_LEN:
        raise UsageError(f"reason too long ({len(reason)} > {MAX_REASON_LEN} characters)")
    if not _REASON_RE.match(reason):
        bad = "".join(sorted({c for c in reason if not _REASON_RE.match(c)}))
        raise UsageError(f"reason contains characters that are not allowed: {bad!r}")
    return reason


def opsctl_reason(reason: str) -> str:
    """An operator's drain through opsctl: ``opsctl:manual:<text>`` (remediation never resumes it)."""
    return owned_reason("manual", reason)


@dataclass
class DrainPlan:
    requested: list[str]
    to_drain: list[str]  # will be drained now
    skipped: dict[str, str] = field(default_factory=dict)  # node -> why it is left alone
    scope: str = ""  # the partition (or "all nodes") the limit counts against
    scope_size: int = 0
    out_before: int = 0  # drained or down in scope before the action
    out_after: int = 0
    limit: int = 0
    refusal: str = ""
    forced: bool = False
    # node -> its reason before: drains by someone else (remediation, the watcher, an operator) that
    # --force takes over; their reason becomes this drain's opsctl:manual: one
    taken_over: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def takeover_note(self) -> str:
        """``gpu-003 taken over from health (opsctl:health:...)``, one per node; "" when none."""
        return "; ".join(
            f"{node} taken over from {previous_owner(reason)} ({reason})"
            for node, reason in self.taken_over.items()
        )


def previous_owner(reason: str) -> str:
    """Who a drain reason says made the drain: health, watch, manual, legacy (an older opsctl), or
    "an operator" (anything else)."""
    return drain_owner(reason) or "an operator"


@dataclass
class ResumePlan:
    requested: list[str]
    to_resume: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    refusal: str = ""
    forced: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def drain_limit(scope_size: int, guard: GuardrailsSection) -> int:
    # Round first so 0.29 * 100 counts as 29, not 28.999...
    share = math.floor(round(guard.max_drain_fraction * scope_size, 9))
    return max(guard.min_drain_nodes, share)


def plan_drain(
    nodes: Sequence[Node],
    requested: Sequence[str],
    guard: GuardrailsSection,
    partition: str | None = None,
    force: bool = False,
) -> DrainPlan:
    targets = select_nodes(list(nodes), requested)  # UsageError on unknown nodes
    if partition:
        scope_nodes = [n for n in nodes if partition in n.partitions]
        if not scope_nodes:
            raise ConfigError(f"partition {partition!r} (slurm.partition) has no nodes")
        scope = f"partition {partition}"
    else:
        scope_nodes = list(nodes)
        scope = "all nodes"
    pool = {n.name: n for n in scope_nodes}
    for node in targets:
        pool.setdefault(node.name, node)
    plan = DrainPlan(requested=list(requested), to_drain=[], scope=scope, scope_size=len(pool), forced=force)
    newly_out = 0
    for node in targets:
        if node.drain_owner in ("manual", "legacy"):
            # already an operator's opsctl drain (legacy: an older opsctl's `opsctl: TEXT`)
            plan.skipped[node.name] = f"already drained by opsctl ({node.reason})"
        elif node.drained_by_opsctl and not force:
            # remediation's (it resumes it once the fix is proven) or the watcher's
            plan.skipped[node.name] = (
                f"already drained by opsctl ({node.reason}); use --force to take it over as manual"
            )
        elif node.drain_flag and not force:
            who = f" by {node.reason_user}" if node.reason_user else ""
            plan.skipped[node.name] = f"already drained{who}: {node.reason!r} (use --force to take it over)"
        else:
            plan.to_drain.append(node.name)
            if node.drain_flag:
                # taken over: the manual reason replaces theirs, so remediation's latch (the exact
                # reason it drained with) no longer matches and it never resumes the node
                plan.taken_over[node.name] = node.reason
            if not node.out_of_service:
                newly_out += 1
    plan.out_before = sum(1 for n in pool.values() if n.out_of_service)
    plan.out_after = plan.out_before + newly_out
    plan.limit = drain_limit(plan.scope_size, guard)
    if newly_out and plan.out_after > plan.limit and not force:
        plan.refusal = (
            f"refusing to drain {fold(plan.to_drain)}: {plan.out_after} of {plan.scope_size} nodes in "
            f"{scope} would be out of service, the limit is {plan.limit} "
            f"(max_drain_fraction {guard.max_drain_fraction:g}, min_drain_nodes {guard.min_drain_nodes}, "
            f"{plan.out_before} already drained or down); use --force to override"
        )
    return plan


def plan_resume(nodes: Sequence[Node], requested: Sequence[str], force: bool = False) -> ResumePlan:
    targets = select_nodes(list(nodes), requested)
    plan = ResumePlan(requested=list(requested), to_resume=[], forced=force)
    foreign = []
    for node in targets:
        if not node.drain_flag and node.state != "down" and "FAIL" not in node.flags:
            plan.skipped[node.name] = f"not drained ({node.display_state})"
        elif node.drained_by_opsctl or force:
            plan.to_resume.append(node.name)
        else:
            who = f" by {node.reason_user}" if node.reason_user else ""
            reason = node.reason or node.display_state
            plan.skipped[node.name] = f"drained{who}, not by opsctl: {reason!r}"
            foreign.append(node.name)
    if foreign:
        plan.refusal = (
            f"refusing to resume {fold(foreign)}: not drained by opsctl "
            f"({'; '.join(plan.skipped[n] for n in foreign)}); use --force to override"
        )
    return plan


def apply_drain(
    backend: SlurmBackend,
    audit: AuditLog,
    plan: DrainPlan,
    reason: str,
    dry_run: bool = False,
) -> str:
    """Carry out a plan; returns the result word. Raises Refused if the plan was refused."""
    full_reason = opsctl_reason(reason)
    record = AuditRecord(action="drain", nodes=plan.requested, result="", reason=full_reason,
                         forced=plan.forced)
    return _apply(backend, audit, record, plan.refusal, plan.to_drain, dry_run,
                  lambda: backend.drain(plan.to_drain, full_reason), note=plan.takeover_note())


def apply_resume(backend: SlurmBackend, audit: AuditLog, plan: ResumePlan, dry_run: bool = False) -> str:
    record = AuditRecord(action="resume", nodes=plan.requested, result="", forced=plan.forced)
    return _apply(backend, audit, record, plan.refusal, plan.to_resume, dry_run,
                  lambda: backend.resume(plan.to_resume))


def _apply(backend: SlurmBackend, audit: AuditLog, record: AuditRecord, refusal: str,
           targets: list[str], dry_run: bool, action: Any, note: str = "") -> str:
    """NOTE (e.g. the drains taken over) ends the detail of a dry run and of an applied action."""
    tail = f"; {note}" if note else ""
    audit.check_writable()
    if refusal:
        record.result, record.detail = "refused", refusal
        audit.append(record)
        raise Refused(refusal)
    if not targets:
        record.result, record.detail = "noop", "nothing to do"
        audit.append(record)
        return "noop"
    if dry_run:
        record.result, record.detail = "dry-run", f"would {record.action} {fold(targets)}{tail}"
        audit.append(record)
        return "dry-run"
    try:
        action()
    except OpsctlError as exc:
        record.result, record.detail = "failed", str(exc)
        audit.append(record)
        raise
    record.result, record.detail = "applied", f"{record.action} {fold(targets)}{tail}"
    audit.append(record)
    return "applied"


def wait_responding(backend: SlurmBackend, names: Sequence[str], timeout: float = 30.0) -> list[str]:
    """After a resume slurmctld marks nodes NOT_RESPONDING until its next ping answers; wait for
    that ping. Returns the nodes still not responding (their slurmd is likely down)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        silent = [n.name for n in backend.nodes(list(names)) if "NOT_RESPONDING" in n.flags]
        if not silent or time.monotonic() >= deadline:
            return silent
        time.sleep(0.5)


def record_rejected(
    audit: AuditLog, action: str, nodes: str, reason: str, error: str, result: str = "rejected"
) -> None:
    """Best effort: bad input (result "rejected") and attempts that could not read the cluster
    ("failed") are audited too, but an unwritable log must not hide the original error."""
    record = AuditRecord(action=action, nodes=[nodes], result=result, reason=reason, detail=error)
    with contextlib.suppress(OpsctlError):
        audit.append(record)
