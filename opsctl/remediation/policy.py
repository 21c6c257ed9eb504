"""Remediation policy: turn node reports into decisions (``decide``).

``decide`` does no I/O: reports + the Slurm view of the nodes + the loaded state
(``opsctl.remediation.state``) in, decisions out; it updates that state in place (failure clocks,
latches taken, spent or observed, clean streaks), which the pass saves unless it is a dry run. Only
``opsctl.remediation.actions.act`` changes the world (drain/resume through the guarded Slurm
actions); in dry-run it changes nothing, and in shadow mode it changes only the shadow state (so a
shadow run shows the brake, holds and resumes it would have made). ``opsctl.remediation.passes``
runs one pass: lock, load, decide, act, save, log.

Rules, in order:

1. Storm: when the same failure signature (check code, plus the XID for XID failures) appears on
   at least ``storm_min_nodes`` nodes and ``storm_fraction`` of the partition in one pass, the
   checker or the fabric is suspect: raise an alert naming that signature and drain nobody for it.
   A storm holds only its own signature: a node that also FAILs outside every storm is judged by
   those other FAILs as usual (drained for them, within the brake); one whose FAILs are all storm
   signatures is held.
2. Ownership: remediation resumes only its own automatic drains: a reason ``opsctl:health:...``
   that matches the latch it recorded when it drained. Operators' drains, ``opsctl drain``
   (``opsctl:manual:``) and the watcher's drains (``opsctl:watch:``) are never resumed or re-drained
   by it; a down node is left alone too.
3. Brake: at most ``max_drains`` nodes, and at most ``max_fraction`` of the partition, are drained
   by opsctl (health and watch together) per ``window_seconds``; beyond that, hold and alert. Where
   the caller knows the room the drain guardrail leaves (``guard_room``: nodes the partition may
   still lose, operators' drains and down nodes counted), a drain past it is held the same way.
   Confirmation: a FAIL of no fatal class (a port, a mount, slurmd; the kind a checker or fabric
   event fakes on many nodes) drains only once it has failed for ``confirm_after`` seconds of passes
   in a row: Prometheus scrapes the nodes at different offsets, so a fleet-wide false FAIL first shows
   on a few nodes, below the storm threshold; the next pass sees the whole storm and holds it.
   Fatal: a node failing a fatal-class check (its fix is a GPU reset, a reboot or a replacement)
   that the brake or the guardrail stops is drained under its own allowance, ``fatal_max_drains``
   per window, counted apart; with that spent too it is latched in service (the latch remembers the
   fix it needs after the fault clears, and drains it once there is room) and paged every pass.
4. Latch: every drain records the action its fault needs (restart_app, reset_gpu, reboot, replace),
   the GPU (index and UUID) and the boot id. A node drained again for the same GPU (or, without a
   GPU, the same check) within ``escalate_window`` is escalated: held for a person, with an alert.
5. Reboot: with ``auto_reboot``, a reboot-class latch on an idle node drained by us asks Slurm once
   to reboot it (``scontrol reboot ASAP nextstate=RESUME``); Slurm resumes it when its slurmd
   registers from the new boot. The kernel's boot id, not Slurm, proves it: a node Slurm resumed
   with the same boot id is latched in service again and drained for the reboot it still needs.
6. Resume: after ``resume_after_clean`` consecutive OK/WARN passes (UNKNOWN breaks the streak), each
   on evidence newer than the last counted one's (passes may come faster than Prometheus scrapes; N
   passes that re-read one scrape are one clean observation, not N), and only with proof of the
   fix: reboot-class needs a changed boot id, reset-class a reset (a changed boot id, or the
   driver's recovery action going from "reset" back to "none" on that GPU); replace-class and
   escalated drains are never resumed automatically.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from opsctl.checks.catalogue import required_action
from opsctl.checks.fixes import ACTION_RANK, DRAIN_CLASSES
from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.model import drain_owner, owned_reason
from opsctl.nodeset import fold
from opsctl.remediation.proof import boot_changed, boot_kind, cleared_by_reset, observe, resume_proof
from opsctl.remediation.state import Latch, PolicyState, repeat_key

REASON_PREFIX = "opsctl:health:"
MAX_REASON = 120
# Fault classes a node must not take work with: its GPU corrupts or loses jobs until reset, reboot or
# repair. A FAIL of "none" or "restart_app" (a port, a mount, slurmd, throttling) is the kind a
# checker or fabric event fakes on healthy nodes: only the brake and the guardrail apply to it.
FATAL_ACTIONS = DRAIN_CLASSES
# Missing evidence is no proof of a fault: like the classes a checker or fabric event fakes, it spends
# the brake only, never the fatal allowance, whatever its latch asks before a resume.
NOT_FATAL_CODES = frozenset({"evidence-lost"})
# FAILs that persisted for their own clock before they were FAILs (unknown_fail_after,
# probe_hung_passes): confirmation would only add to it.
SELF_CONFIRMED_CODES = frozenset({"evidence-lost", "probe-hung"})
# Seconds a node Slurm resumed after the reboot we asked for may keep its old boot id before it
# counts as not rebooted: the boot id's exporter (node_exporter) comes back with the node and is
# scraped within one scrape interval (15 s), at its own offset from dcgm-exporter's.
REBOOT_PROOF_GRACE = 60.0


def is_fatal(v: Verdict) -> bool:
    return required_action(v) in FATAL_ACTIONS and v.code not in NOT_FATAL_CODES


class SlurmNodeView(Protocol):
    """What policy needs from a Slurm node (``opsctl.model.Node`` has all of it)."""

    name: str
    state: str
    reason: str
    flags: set[str]

    @property
    def drain_flag(self) -> bool: ...


@dataclass
class Decision:
    node: str  # a node name, or a folded node set for an alert
    action: str  # drain | resume | reboot | alert | hold | keep | none
    why: str
    code: str = ""
    reason: str = ""  # the Slurm reason a drain would set
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    signature: str = ""  # failure signature (storm detection across passes)
    # pending | applied | dry-run | shadow | failed | noop | refused; unconfirmed (a drain Slurm may
    # have applied: its intent waits for the next pass); reconciled, dropped (that pass's verdict)
    result: str = "pending"
    latch: dict[str, Any] = field(default_factory=dict)  # what a drain (or a fatal hold) latches
    allowance: str = ""  # a drain's: "brake" (the brake's budget) or "fatal" (fatal_max_drains)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_REASON_CHARS = re.compile(r"[^A-Za-z0-9 .,_/@%+=-]")


def drain_reason(v: Verdict, suffix: str = "", owner: str = "health") -> str:
    """``opsctl:<owner>:<code>:<short evidence>``, in the plain characters the guardrails accept."""
    short = " ".join(_REASON_CHARS.sub(" ", v.short_evidence).split())
    return owned_reason(owner, f"{v.code}:{short}")[: MAX_REASON - len(suffix)] + suffix


def signature(v: Verdict) -> str:
    xid = v.evidence.get("xid")
    return f"{v.code}:xid{xid}" if xid is not None else v.code


def _worst(verdicts: list[Verdict]) -> Verdict:
    """The failing verdict whose fix is heaviest (it decides what the drain latches)."""
    return max(verdicts, key=lambda v: ACTION_RANK[required_action(v)])


def _latch_for(report: NodeReport, v: Verdict, now: float) -> Latch:
    gpu = v.gpu
    action = required_action(v)
    latch = Latch(
        reason="",
        time=now,
        code=v.code,
        action=action,
        gpu=gpu,
        gpu_uuid=str(v.evidence.get("uuid") or (report.gpu_uuids.get(gpu, "") if gpu is not None else "")),
        boot_id=report.boot_id,
        boot_kind=boot_kind(report.boot_id, report.boot_kind),
        signature=signature(v),
    )
    observe(latch, report)
    return latch


@dataclass(frozen=True)
class Storm:
    """One failure signature on too many nodes at once: its drains are held, and it is alerted."""

    signature: str
    nodes: tuple[str, ...]  # this pass's nodes failing it
    threshold: int

    def alert(self) -> Decision:
        return Decision(
            node=fold(list(self.nodes)),
            action="alert",
            code="storm",
            signature=self.signature,
            why=f"storm: {self.signature} on {len(self.nodes)} nodes at once (>= {self.threshold}); suspect "
            "the checker or the fabric, no drain for it",
        )


def storm_threshold(cfg: PolicyConfig, size: int) -> int:
    return max(cfg.storm_min_nodes, math.ceil(cfg.storm_fraction * size))


def find_storms(
    failing: dict[str, list[Verdict]], drains: list[dict[str, Any]], cfg: PolicyConfig, now: float, size: int
) -> list[Storm]:
    """The signatures failing on at least the storm threshold of nodes in this pass, counting the
    nodes opsctl drained for the same signature within the brake window (a storm that arrives over
    several passes), sorted by signature."""
    by_sig: dict[str, list[str]] = defaultdict(list)
    for node, verdicts in sorted(failing.items()):
        for sig in sorted({signature(v) for v in verdicts}):
            by_sig[sig].append(node)
    recent: dict[str, set[str]] = defaultdict(set)
    for d in drains:
        if now - float(d.get("time", 0)) < cfg.window_seconds and d.get("signature"):
            recent[str(d["signature"])].add(str(d["node"]))
    at = storm_threshold(cfg, size)
    return [
        Storm(sig, tuple(nodes), at)
        for sig, nodes in sorted(by_sig.items())
        if len(set(nodes) | recent[sig]) >= at
    ]


def outside_storms(verdicts: list[Verdict], stormed: set[str]) -> list[Verdict]:
    """The failing verdicts no storm holds: a node with any is judged on them as usual."""
    return [v for v in verdicts if signature(v) not in stormed]


def note_failing_since(state: PolicyState, reports: list[NodeReport], failing: dict[str, list[Verdict]],
                       now: float) -> None:
    """When each failing node's signatures were first seen, in a row: a signature not failing this
    pass starts again; an UNKNOWN node keeps its clocks (no evidence either way)."""
    for r in reports:
        if r.status is Status.UNKNOWN:
            continue
        sigs = {signature(v) for v in failing.get(r.node, [])}
        before = state.failing_since.get(r.node, {})
        now_failing = {sig: before.get(sig, now) for sig in sorted(sigs)}
        if now_failing:
            state.failing_since[r.node] = now_failing
        else:
            state.failing_since.pop(r.node, None)


def unconfirmed(state: PolicyState, node: str, verdicts: list[Verdict], cfg: PolicyConfig,
                now: float) -> float | None:
    """None when some verdict has failed for ``confirm_after`` (or confirmation is off); else the
    seconds the oldest has failed so far."""
    if cfg.confirm_after <= 0 or any(v.code in SELF_CONFIRMED_CODES for v in verdicts):
        return None
    since = state.failing_since.get(node, {})
    age = max((now - since.get(signature(v), now) for v in verdicts), default=0.0)
    return None if age >= cfg.confirm_after else age


def storm_held_why(verdicts: list[Verdict]) -> str:
    sigs = ", ".join(sorted({signature(v) for v in verdicts}))
    return f"held: every failure is part of a storm ({sigs}; see its alert)"


def brake_limit(cfg: PolicyConfig, size: int) -> int:
    """Drains per window: ``max_drains``, and ``max_fraction`` of the partition, but never less than
    one node (as the drain guardrails do)."""
    return min(cfg.max_drains, max(1, math.floor(cfg.max_fraction * size)))


def in_window(drains: list[dict[str, Any]], cfg: PolicyConfig, now: float, allowance: str) -> int:
    """opsctl's drains inside the window that spent ``allowance``: "brake" (health's and watch's,
    those of earlier versions included) or "fatal"."""
    return sum(
        1 for d in drains
        if now - float(d.get("time", 0)) < cfg.window_seconds and (d.get("allowance") or "brake") == allowance
    )


@dataclass
class Budget:
    """What this pass may still drain: the brake's budget, the nodes the drain guardrail still lets
    out of service (None: not known here; the guardrail itself refuses in ``act``), and the fatal
    allowance, which fatal-class drains spend when either of the others stops them."""

    brake: int
    fatal: int
    room: int | None = None

    @classmethod
    def start(cls, drains: list[dict[str, Any]], cfg: PolicyConfig, size: int, now: float,
              room: int | None) -> Budget:
        return cls(brake_limit(cfg, size) - in_window(drains, cfg, now, "brake"),
                   cfg.fatal_max_drains - in_window(drains, cfg, now, "fatal"), room)

    def take(self, fatal: bool) -> str:
        """The allowance a drain spends ("brake", "fatal"), or "" when none is left for it."""
        if self.brake > 0 and (self.room is None or self.room > 0):
            self.brake -= 1
            allowance = "brake"
        elif fatal and self.fatal > 0:
            self.fatal -= 1
            allowance = "fatal"
        else:
            return ""
        if self.room is not None:
            self.room -= 1
        return allowance

    def stopped_by(self) -> str:
        """Why a drain is not allowed now, as a hold decision says it."""
        if self.brake <= 0:
            return "brake: drain budget for the window is spent"
        return ("guardrail: the partition's share out of service ([guardrails] max_drain_fraction, "
                "operators' drains and down nodes counted) is reached")


def take_pending(state: PolicyState, report: NodeReport, sv: SlurmNodeView | None) -> Latch | None:
    """The node's in-service latch (a fatal fault nothing could drain), updated with this report;
    None when there is none, or it is spent: the fix is proven, or someone drained the node (their
    call, as with a latched drain taken over)."""
    latch = state.latch(report.node)
    if latch is None or not latch.in_service:
        return None
    observe(latch, report)
    proven = report.status in (Status.OK, Status.WARN) and resume_proof(latch, report)[0]
    if proven or (sv is not None and sv.drain_flag):
        state.latches.pop(report.node, None)
        return None
    state.set_latch(report.node, latch)
    return latch


def _drain_decision(report: NodeReport, worst: Verdict, verdict_json: list[dict[str, Any]],
                    state: PolicyState, cfg: PolicyConfig, now: float, owner: str, allowance: str,
                    pending: Latch | None) -> Decision:
    """Drain ``report.node`` for ``worst``, latching its action (no lighter than a pending latch's);
    a repeat on the same GPU (or check) within ``escalate_window`` is escalated."""
    node = report.node
    new = _latch_for(report, worst, now)
    if pending is not None and ACTION_RANK[pending.action] > ACTION_RANK[new.action]:
        new.action = pending.action
    key = repeat_key(node, new.code, new.gpu_uuid)
    # a fault already latched (in service, or resumed by Slurm without its reboot) drained now is the
    # same fault, not a repeat
    repeat = pending is None and cfg.escalate_window > 0 and any(
        d.get("key") == key and now - float(d.get("time", 0)) < cfg.escalate_window for d in state.drains
    )
    new.escalated = repeat
    new.reason = drain_reason(worst, " repeat-held" if repeat else "", owner)
    why = f"failing check; latches {new.action}"
    if repeat:
        why = "failing again within the escalation window: drained and held for a person"
    if allowance == "fatal":
        why += "; fatal-class fault past the brake or the drain guardrail: [health] fatal_max_drains"
    return Decision(node, "drain", why, worst.code, new.reason, verdict_json, signature=signature(worst),
                    latch=asdict(new), allowance=allowance)


def _pending_drain(report: NodeReport, pending: Latch, verdict_json: list[dict[str, Any]], now: float,
                   allowance: str) -> Decision:
    """Drain a node for the fatal fault it latched in service, though it no longer shows it."""
    latch = Latch.from_json({**asdict(pending), "time": now, "in_service": False})
    why = f"latched {latch.action} in service (fault since cleared, fix not proven): drained now"
    return Decision(report.node, "drain", why, latch.code, latch.reason, verdict_json,
                    signature=latch.signature, latch=asdict(latch), allowance=allowance)


def _fatal_hold(report: NodeReport, latch: Latch, verdict_json: list[dict[str, Any]], budget: Budget,
                cfg: PolicyConfig) -> Decision:
    """A fatal node nothing may drain: held in service, latched (``act`` records it) and paged."""
    why = (f"fatal: {report.node} needs {latch.action} ({latch.reason}) and is not drained: "
           f"{budget.stopped_by()}, and the fatal allowance ([health] fatal_max_drains "
           f"{cfg.fatal_max_drains} per {cfg.window_seconds:.0f}s) is spent; it still takes jobs")
    return Decision(report.node, "hold", why, latch.code, latch.reason, verdict_json,
                    signature=latch.signature, latch=asdict(latch))


def _in_service_latch(report: NodeReport, worst: Verdict, now: float, owner: str,
                      pending: Latch | None) -> Latch:
    latch = pending or _latch_for(report, worst, now)
    if ACTION_RANK[required_action(worst)] > ACTION_RANK[latch.action]:
        latch.action = required_action(worst)
    if not latch.reason:
        latch.reason = drain_reason(worst, owner=owner)
    latch.in_service = True
    return latch


def pass_alerts(decisions: list[Decision], cfg: PolicyConfig, size: int) -> list[Decision]:
    """The alerts a pass's drain and hold decisions raise: held nodes (brake or guardrail, a
    ticket), each fatal node left in service (a page, every pass while it holds), fatal drains past
    the limits (a ticket) and escalations (a page)."""
    alerts = []
    held = [d for d in decisions if d.action == "hold" and not d.latch]
    if held:
        nodes = fold([d.node for d in held])
        if all(d.why.startswith("brake:") for d in held):
            why = (f"brake: {len(held)} failing node(s) not drained; limit {cfg.max_drains} nodes / "
                   f"{cfg.max_fraction:.0%} of {size} per {cfg.window_seconds:.0f}s already reached")
        else:
            why = (f"brake or guardrail: {len(held)} failing node(s) not drained; the brake's budget is "
                   "spent or the drain guardrail's share of the partition is already out of service")
        alerts.append(Decision(node=nodes, action="alert", code="brake", why=why))
    alerts.extend(Decision(node=d.node, action="alert", code="fatal-held", why=d.why, signature=d.signature)
                  for d in decisions if d.action == "hold" and d.latch)
    fatal = [d.node for d in decisions if d.action == "drain" and d.allowance == "fatal"]
    if fatal:
        alerts.append(Decision(
            node=fold(fatal), action="alert", code="fatal-drain",
            why=f"fatal-class fault(s) drained past the brake or the drain guardrail under [health] "
            f"fatal_max_drains ({cfg.fatal_max_drains} per {cfg.window_seconds:.0f}s): the partition "
            "is below its usual floor until they are repaired"))
    escalated = [d.node for d in decisions if d.action == "drain" and d.latch.get("escalated")]
    if escalated:
        alerts.append(Decision(
            node=fold(escalated), action="alert", code="escalated",
            why=f"repeat fault within {cfg.escalate_window:.0f}s on the same GPU (or check): drained "
            "and held; a person must repair and resume"))
    return alerts


# Who holds a drain that is not remediation's own (``opsctl.model.drain_owner``), as a decision says it.
_HELD_BY = {
    "manual": "opsctl drain by an operator",
    "watch": "drained by opsctl watch (a run's failed node)",
    "legacy": "opsctl drain of an earlier version",
    "health": "health drain without a latch in this state file",
}


@dataclass
class _Pass:
    """What ``decide`` carries from node to node: the state it updates, who drains, the signatures
    the storms hold and what the pass may still drain."""

    state: PolicyState
    cfg: PolicyConfig
    now: float
    owner: str
    stormed: set[str]
    budget: Budget


@dataclass
class _Node:
    """One node as ``decide`` sees it: its report, Slurm's view, and the latch that is still ours."""

    report: NodeReport
    sv: SlurmNodeView | None
    verdict_json: list[dict[str, Any]]
    failing: list[Verdict]  # the report's FAIL verdicts
    pending: Latch | None  # a fatal fault latched in service
    latch: Latch | None  # the latch of our own drain, while Slurm still shows it
    held_by: str  # who holds the node's drain (drain_owner), "" when not drained
    ours: bool  # drained by us, with the reason the latch recorded
    foreign: bool  # drained by someone else
    status: Status  # the report's, OK where a proven reset cleared every FAIL
    rebooted: str = ""  # Slurm resumed it after the reboot we asked for: what the boot id says

    @property
    def node(self) -> str:
        return self.report.node


def decide(
    reports: list[NodeReport],
    slurm_nodes: dict[str, SlurmNodeView],
    state: PolicyState,
    cfg: PolicyConfig,
    now: float,
    partition_size: int | None = None,
    owner: str = "health",
    guard_room: int | None = None,
) -> list[Decision]:
    """Decide for every report. ``owner`` is who drains: "health" (remediation, which latches and
    later resumes its drains) or "watch" (a run's failed nodes: drained through the same storm and
    brake rules, never resumed automatically). ``guard_room``: how many more nodes the drain
    guardrail lets out of service (None: not known; the guardrail refuses in ``act``)."""
    size = partition_size if partition_size is not None else max(len(slurm_nodes), len(reports))
    failing: dict[str, list[Verdict]] = {
        r.node: [v for v in r.verdicts if v.status is Status.FAIL] for r in reports if r.status is Status.FAIL
    }
    # 1. storms: the same signature on many nodes at once; each holds only its own signature
    storms = find_storms(failing, state.drains, cfg, now, size)
    note_failing_since(state, reports, failing, now)
    decisions = [storm.alert() for storm in storms]
    # 3. the brake budget for this pass (every opsctl drain in the window, health's and watch's), the
    # guardrail's room, and the fatal allowance beyond both
    p = _Pass(state, cfg, now, owner, {storm.signature for storm in storms},
              Budget.start(state.drains, cfg, size, now, guard_room))
    for report in sorted(reports, key=lambda r: r.node):
        n = _see_node(p, report, slurm_nodes.get(report.node), failing.get(report.node, []))
        decisions.append(_decide_node(p, n))
    decisions.extend(pass_alerts(decisions, cfg, size))
    return decisions


def _see_node(p: _Pass, report: NodeReport, sv: SlurmNodeView | None, failing: list[Verdict]) -> _Node:
    """The node's latches against Slurm's view: an in-service latch taken (or spent), our drain's
    latch kept only while Slurm still shows our reason (else spent: resumed or taken over by someone
    else, their call), and observed with this report."""
    state, node = p.state, report.node
    pending = take_pending(state, report, sv)
    latch = None if pending is not None else state.latch(node)
    held_by = drain_owner(sv.reason) if sv is not None and sv.drain_flag else ""
    ours = latch is not None and sv is not None and sv.drain_flag and sv.reason == latch.reason
    rebooted = ""
    if latch is not None and not ours and latch.reboot_asked and sv is not None and not sv.drain_flag:
        rebooted, pending = after_slurm_reboot(state, report, latch, sv, p.now)
        latch = None
    elif latch is not None and not ours:
        state.latches.pop(node, None)
        state.end_streak(node)
        latch = None
    if ours and latch is not None:
        observe(latch, report)
        state.set_latch(node, latch)
    status = report.status
    if status is Status.FAIL and ours and latch is not None and all(
        cleared_by_reset(v, latch, report) for v in failing
    ):
        status = Status.OK  # only the XIDs the proven reset dealt with are left in the window
    foreign = sv is not None and sv.drain_flag and not ours
    return _Node(report, sv, [v.to_json() for v in report.problems], failing, pending, latch, held_by,
                 ours, foreign, status, rebooted)


def after_slurm_reboot(state: PolicyState, report: NodeReport, latch: Latch, sv: SlurmNodeView,
                       now: float) -> tuple[str, Latch | None]:
    """Slurm resumed a node we asked it to reboot: the boot id says whether it did. Proven: the
    latch is spent. Not rebooted (the same boot id ``REBOOT_PROOF_GRACE`` after the pass that first
    saw the node back): latched in service again, so the pass drains it for the reboot it still
    needs. No boot id yet, or the same one within the grace (its exporter not scraped since): wait."""
    node = report.node
    if not latch.back_seen:
        latch.back_seen = now
        state.set_latch(node, latch)
    unknown = report.status is Status.UNKNOWN
    changed, why = (None, "no evidence") if unknown else boot_changed(latch, report)
    if changed is False and now - latch.back_seen < REBOOT_PROOF_GRACE:
        changed, why = None, f"the same boot id for {now - latch.back_seen:.0f}s since it came back"
    if changed is None:
        return f"resumed by Slurm after the reboot asked; waiting for its boot id ({why})", None
    if changed:
        state.latches.pop(node, None)
        state.end_streak(node)
        return f"rebooted through Slurm and resumed by it ({why})", None
    latch.in_service, latch.reboot_asked, latch.back_seen = True, 0.0, 0.0
    observe(latch, report)
    state.set_latch(node, latch)
    return f"resumed by Slurm ({sv.state}) but not rebooted: {why}", latch


def _decide_node(p: _Pass, n: _Node) -> Decision:
    """One node's decision: failing, a fatal latch in service with the fault cleared, unknown, or
    clean."""
    if n.rebooted and n.pending is None:
        return Decision(n.node, "none", n.rebooted, "", "", n.verdict_json)
    if n.rebooted:  # resumed by Slurm, not rebooted: drained again (or held) for its latch
        d = _decide_node(p, replace(n, rebooted=""))
        d.why = f"{n.rebooted}; {d.why}"
        return d
    reboot = _reboot(p, n)
    if reboot is not None:
        return reboot
    if n.status is Status.FAIL:
        p.state.end_streak(n.node)
        return _decide_failing(p, n)
    if n.pending is not None and n.sv is not None:  # cleared (or unreadable), the fix not proven
        return _decide_pending(p, n, n.pending, n.sv)
    if n.status is Status.UNKNOWN:
        p.state.end_streak(n.node)
        return Decision(n.node, "none", "unknown: never a reason to drain or resume", "", "", n.verdict_json)
    return _decide_clean(p, n)


def _reboot(p: _Pass, n: _Node) -> Decision | None:
    """With ``auto_reboot``: our reboot-class drain on an idle node, not yet rebooted and never asked
    for, whose source gives a boot id (else no reboot could be proven): ask Slurm to reboot it."""
    latch, sv = n.latch, n.sv
    if not (p.cfg.auto_reboot and p.owner == "health" and n.ours and latch is not None and sv is not None):
        return None
    if latch.action != "reboot" or latch.escalated or latch.reboot_asked or not latch.boot_id:
        return None
    if sv.state != "idle" or "COMPLETING" in sv.flags or boot_changed(latch, n.report)[0] is not False:
        return None  # jobs still running, or already rebooted (the resume path proves it)
    why = ("reboot-class drain on an idle node: Slurm reboots it (scontrol reboot ASAP "
           "nextstate=RESUME) and resumes it from the new boot; the boot id proves it")
    return Decision(n.node, "reboot", why, latch.code, latch.reason, n.verdict_json,
                    signature=latch.signature, latch=asdict(latch))


def _decide_failing(p: _Pass, n: _Node) -> Decision:
    """A failing node: judged on the FAILs outside every storm; drained, kept, held or left alone."""
    own = outside_storms(n.failing, p.stormed)  # judged as usual; the rest are the storms'
    worst = _worst(own or n.failing)
    sv = n.sv
    if not own:
        return Decision(n.node, "none", storm_held_why(n.failing), worst.code, "", n.verdict_json)
    if sv is None:
        return Decision(n.node, "none", "not a Slurm node", worst.code, "", n.verdict_json)
    if n.foreign:
        who = _HELD_BY.get(n.held_by, "operator drain")
        return Decision(n.node, "none", f"{who} left alone ({sv.reason!r})", worst.code, "", n.verdict_json)
    if n.ours and n.latch is not None:
        latch = n.latch
        if ACTION_RANK[required_action(worst)] > ACTION_RANK[latch.action]:
            latch.action = required_action(worst)  # a heavier fault arrived while drained
            p.state.set_latch(n.node, latch)
        return Decision(n.node, "keep", f"still failing; stays drained ({latch.action} latched)",
                        worst.code, "", n.verdict_json)
    if sv.state in ("down", "future"):
        return Decision(n.node, "none", f"node is {sv.state}", worst.code, "", n.verdict_json)
    return _drain_or_hold(p, n, worst)


def _drain_or_hold(p: _Pass, n: _Node, worst: Verdict) -> Decision:
    """Drain within the budget (a fatal fault may spend the fatal allowance); else hold: a fatal node
    latched in service and paged, any other held for the brake's alert."""
    fatal = p.owner == "health" and (is_fatal(worst) or n.pending is not None)
    if p.owner == "health" and not fatal:
        own = outside_storms(n.failing, p.stormed)
        age = unconfirmed(p.state, n.node, own, p.cfg, p.now)
        if age is not None:
            why = (f"confirming: failing for {age:.0f}s; a FAIL of no fatal class drains once it persists "
                   f"for [health] confirm_after ({p.cfg.confirm_after:.0f}s)")
            return Decision(n.node, "none", why, worst.code, "", n.verdict_json, signature=signature(worst))
    allowance = p.budget.take(fatal)
    if allowance:
        return _drain_decision(n.report, worst, n.verdict_json, p.state, p.cfg, p.now, p.owner, allowance,
                               n.pending)
    if fatal:
        latched = _in_service_latch(n.report, worst, p.now, p.owner, n.pending)
        return _fatal_hold(n.report, latched, n.verdict_json, p.budget, p.cfg)
    return Decision(n.node, "hold", p.budget.stopped_by(), worst.code, drain_reason(worst, owner=p.owner),
                    n.verdict_json)


def _decide_pending(p: _Pass, n: _Node, pending: Latch, sv: SlurmNodeView) -> Decision:
    """A fatal fault latched in service that no longer shows: drained for it when there is room."""
    down = sv.state in ("down", "future")
    allowance = "" if down else p.budget.take(True)
    if allowance:
        return _pending_drain(n.report, pending, n.verdict_json, p.now, allowance)
    if down:
        why = f"node is {sv.state}; {pending.action} latched"
        return Decision(n.node, "none", why, "", "", n.verdict_json)
    held = _fatal_hold(n.report, pending, n.verdict_json, p.budget, p.cfg)
    held.why += f" (fault cleared, {pending.action} not proven since)"
    return held


def _decide_clean(p: _Pass, n: _Node) -> Decision:
    """An OK or WARN pass: counted towards resuming our own drain, else nothing to do."""
    if n.ours and n.latch is not None and n.sv is not None:
        return _count_clean(p, n, n.latch, n.sv)
    p.state.end_streak(n.node)
    why = n.status.value.lower()
    if n.foreign:
        why += f"; drained by someone else, left alone ({n.sv.reason!r})" if n.sv is not None else ""
    return Decision(n.node, "none", why, "", "", n.verdict_json)


def _count_clean(p: _Pass, n: _Node, latch: Latch, sv: SlurmNodeView) -> Decision:
    """Count a clean pass on new evidence (a re-read scrape counts once); after
    ``resume_after_clean`` of them, resume where the fix is proven."""
    state, cfg, node = p.state, p.cfg, n.node
    seen, last = n.report.observed_at, state.clean_seen.get(node)
    if seen is not None and last is not None and seen <= last:
        streak = state.clean_streak.get(node, 0)
        return Decision(node, "keep", f"clean {streak}/{cfg.resume_after_clean} passes; no new evidence "
                        "since the last counted pass (the same scrape)", "", sv.reason, n.verdict_json)
    streak = state.clean_streak.get(node, 0) + 1
    state.clean_streak[node] = streak
    if seen is not None:
        state.clean_seen[node] = seen
    if streak < cfg.resume_after_clean:
        return Decision(node, "keep", f"clean {streak}/{cfg.resume_after_clean} passes", "", sv.reason,
                        n.verdict_json)
    proven, why = resume_proof(latch, n.report)
    return Decision(node, "resume" if proven else "keep", f"clean {streak}/{cfg.resume_after_clean} passes; "
                    f"{why}", latch.code, sv.reason, n.verdict_json)
