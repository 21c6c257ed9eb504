"""Operator actions on the launch quarantine list: list, add, release.

Plan first (pure: the list, the Slurm view and the request in, a plan or a UsageError out), then
apply: the only step that changes the file, done under the writers' lock on a fresh read, and
recorded in the audit log (`quarantine-add`, `quarantine-release`) like drains and resumes.
Neither action touches Slurm: adding does not drain, releasing does not resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opsctl.audit import AuditLog, AuditRecord, current_user
from opsctl.drain import record_rejected, validate_reason
from opsctl.errors import OpsctlError, UsageError
from opsctl.launch.quarantine import Quarantine, QuarantineEntry
from opsctl.model import Node
from opsctl.nodeset import fold, parse_nodeset
from opsctl.slurm.base import SlurmBackend

ADD, RELEASE = "quarantine-add", "quarantine-release"


@dataclass
class SlurmView:
    """Slurm's nodes, or why they could not be read (a listing never fails for that)."""

    nodes: dict[str, Node] | None
    error: str = ""

    @property
    def reachable(self) -> bool:
        return self.nodes is not None


def read_slurm(backend_factory: Callable[[], SlurmBackend]) -> SlurmView:
    """Every node Slurm knows; any failure to ask (daemon down, no Slurm client) is an unknown view."""
    try:
        found = backend_factory().nodes(None)
    except OpsctlError as exc:
        return SlurmView(None, str(exc))
    return SlurmView({n.name: n for n in found})


def utc_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds") if epoch else ""


@dataclass
class ListedNode:
    node: str
    reason: str
    run_id: str
    job_id: int
    since: str  # UTC ISO 8601; "" when the entry carries no time
    user: str
    slurm_state: str  # Slurm's display state; "unknown" when Slurm could not be read
    slurm_reason: str
    drained_by_opsctl: bool


@dataclass
class Listing:
    file: str
    slurm_reachable: bool
    slurm_error: str
    nodes: list[ListedNode]

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "slurm": {"reachable": self.slurm_reachable, "error": self.slurm_error},
            "count": len(self.nodes),
            "nodes": [asdict(n) for n in self.nodes],
        }


def list_quarantine(quarantine: Quarantine, slurm: SlurmView, names: Sequence[str] | None = None) -> Listing:
    """The quarantined nodes (those of `names` only, when given) with their current Slurm state."""
    wanted = set(names) if names is not None else None
    rows = []
    for name, entry in sorted(quarantine.entries.items()):
        if wanted is not None and name not in wanted:
            continue
        node = slurm.nodes.get(name) if slurm.nodes is not None else None
        if slurm.nodes is None:
            state, reason = "unknown", ""
        elif node is None:
            state, reason = "not in slurm", ""
        else:
            state, reason = node.display_state, node.reason
        rows.append(ListedNode(
            node=name, reason=entry.reason, run_id=entry.run_id, job_id=entry.job_id,
            since=utc_iso(entry.time), user=entry.user, slurm_state=state, slurm_reason=reason,
            drained_by_opsctl=bool(node and node.drained_by_opsctl),
        ))
    return Listing(str(quarantine.path), slurm.reachable, slurm.error, rows)


@dataclass
class ReleasePlan:
    requested: list[str]
    entries: list[QuarantineEntry]  # what is released, as the file held it
    reason: str = ""
    # node -> its Slurm state, for nodes that stay out of service after the release
    still_drained: dict[str, str] = field(default_factory=dict)
    drained_by_opsctl: list[str] = field(default_factory=list)  # `opsctl resume` returns these
    slurm_error: str = ""  # why the Slurm state was not checked

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for entry in data["entries"]:
            entry["since"] = utc_iso(entry["time"])
        return data


@dataclass
class AddPlan:
    requested: list[str]
    to_add: list[str]
    reason: str
    already: dict[str, str] = field(default_factory=dict)  # node -> its existing entry's reason
    slurm_error: str = ""  # why the node names were not checked against Slurm

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _not_quarantined(quarantine: Quarantine, names: Sequence[str]) -> list[str]:
    return [n for n in names if n not in quarantine.entries]


def check_quarantined(quarantine: Quarantine, names: Sequence[str]) -> None:
    """UsageError naming every one of `names` that is not quarantined."""
    missing = _not_quarantined(quarantine, names)
    if missing:
        raise UsageError(f"not quarantined: {fold(missing)} (nothing released; see `opsctl quarantine list`)")


def plan_release(
    quarantine: Quarantine, names: Sequence[str], slurm: SlurmView, reason: str = ""
) -> ReleasePlan:
    """All or nothing: UsageError naming every requested node that is not quarantined."""
    check_quarantined(quarantine, names)
    plan = ReleasePlan(list(names), [quarantine.entries[n] for n in names], reason, slurm_error=slurm.error)
    for name in names:
        node = slurm.nodes.get(name) if slurm.nodes is not None else None
        if node is not None and node.out_of_service:
            plan.still_drained[name] = node.display_state + (f" ({node.reason})" if node.reason else "")
            if node.drained_by_opsctl:
                plan.drained_by_opsctl.append(name)
    return plan


def plan_add(quarantine: Quarantine, names: Sequence[str], slurm: SlurmView, reason: str) -> AddPlan:
    """UsageError for node names Slurm does not know (checked only when Slurm answers)."""
    if slurm.nodes is not None:
        unknown = [n for n in names if n not in slurm.nodes]
        if unknown:
            raise UsageError(f"unknown node(s): {fold(unknown)} (not in Slurm; nothing quarantined)")
    plan = AddPlan(list(names), [], reason, slurm_error=slurm.error)
    for name in names:
        entry = quarantine.entries.get(name)
        if entry is not None:
            plan.already[name] = entry.reason
        else:
            plan.to_add.append(name)
    return plan


def apply_release(path: str | Path, audit: AuditLog, plan: ReleasePlan, dry_run: bool = False) -> str:
    """Remove the plan's entries; returns the result word (applied, dry-run). Audited either way."""
    record = AuditRecord(action=RELEASE, nodes=plan.requested, result="", reason=plan.reason)
    audit.check_writable()
    if dry_run:
        record.result, record.detail = "dry-run", f"would release {fold(plan.requested)}"
        audit.append(record)
        return "dry-run"
    with Quarantine.locked(path) as fresh:
        # Another operator (or a watcher) may have changed the list since the plan was made.
        missing = _not_quarantined(fresh, plan.requested)
        if missing:
            record.result, record.detail = "rejected", f"no longer quarantined: {fold(missing)}"
            audit.append(record)
            raise UsageError(f"not quarantined: {fold(missing)} (released meanwhile; nothing released)")
        for name in plan.requested:
            del fresh.entries[name]
        fresh.save()
    was = "; ".join(f"{e.node}: {_origin(e)}" for e in plan.entries)
    record.result, record.detail = "applied", f"released {fold(plan.requested)} (was {was})"
    audit.append(record)
    return "applied"


def apply_add(path: str | Path, audit: AuditLog, plan: AddPlan, dry_run: bool = False) -> str:
    """Add the plan's nodes; returns applied, dry-run or noop (all already quarantined). Audited."""
    record = AuditRecord(action=ADD, nodes=plan.requested, result="", reason=plan.reason)
    audit.check_writable()
    if not plan.to_add:
        record.result, record.detail = "noop", f"already quarantined: {fold(plan.already)}"
        audit.append(record)
        return "noop"
    if dry_run:
        record.result, record.detail = "dry-run", f"would quarantine {fold(plan.to_add)}"
        audit.append(record)
        return "dry-run"
    user, now = current_user(), round(time.time(), 3)
    with Quarantine.locked(path) as fresh:
        added = [n for n in plan.to_add if n not in fresh.entries]
        for name in added:
            fresh.entries[name] = QuarantineEntry(name, plan.reason, time=now, user=user)
        if added:
            fresh.save()
    record.result = "applied" if added else "noop"
    record.detail = f"quarantined {fold(added)}" if added else f"already quarantined: {fold(plan.to_add)}"
    audit.append(record)
    plan.to_add = added
    return record.result


def _origin(entry: QuarantineEntry) -> str:
    if entry.run_id:
        return f"{entry.reason!r} in run {entry.run_id} job {entry.job_id}"
    return f"{entry.reason!r} by {entry.user or 'unknown'}"


@contextmanager
def _audit_refusal(audit: AuditLog, action: str, nodeset: str, reason: str) -> Iterator[None]:
    """Bad input is audited as rejected, an unreadable file or cluster as failed; then re-raised."""
    try:
        yield
    except OpsctlError as exc:
        record_rejected(audit, action, nodeset, reason, str(exc),
                        "rejected" if isinstance(exc, UsageError) else "failed")
        raise


def release(path: str | Path, audit: AuditLog, backend_factory: Callable[[], SlurmBackend],
            nodeset: str, reason: str = "", dry_run: bool = False) -> tuple[ReleasePlan, str]:
    """`opsctl quarantine release`: validate, plan, apply; bad input is audited as rejected."""
    with _audit_refusal(audit, RELEASE, nodeset, reason):
        names = parse_nodeset(nodeset)
        clean = validate_reason(reason) if reason.strip() else ""
        quarantine = Quarantine.load(path)
        check_quarantined(quarantine, names)  # before asking Slurm: the answer does not depend on it
        plan = plan_release(quarantine, names, read_slurm(backend_factory), clean)
    return plan, apply_release(path, audit, plan, dry_run)


def add(path: str | Path, audit: AuditLog, backend_factory: Callable[[], SlurmBackend],
        nodeset: str, reason: str, dry_run: bool = False) -> tuple[AddPlan, str]:
    """`opsctl quarantine add`: validate, plan, apply; bad input is audited as rejected."""
    with _audit_refusal(audit, ADD, nodeset, reason):
        names = parse_nodeset(nodeset)
        clean = validate_reason(reason)
        quarantine = Quarantine.load(path)
        plan = plan_add(quarantine, names, read_slurm(backend_factory), clean)
    return plan, apply_add(path, audit, plan, dry_run)
