"""Acting on decisions: the only step of remediation that changes anything.

``GuardedSlurm`` drains and resumes through the shared guardrails (``opsctl.drain``) and the audit
log; ``act`` carries out a pass's decisions and records them in the state (each drain's intent saved
first, settled by the next pass's ``reconcile``); ``DecisionLog`` is the JSONL log of every decision.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from opsctl import drain
from opsctl.audit import AuditLog, AuditRecord
from opsctl.config import Config
from opsctl.errors import EXIT_UNKNOWN, ConfigError, OpsctlError, Refused, Unreachable
from opsctl.model import Node
from opsctl.remediation.policy import Decision, SlurmNodeView
from opsctl.remediation.state import DrainIntent, Latch, PolicyState, record_drain_done
from opsctl.slurm.base import SlurmBackend
from opsctl.slurm.snapshot import SlurmSnapshot


class SlurmActions(Protocol):
    """Drain and resume; a result word ("applied", "noop") or None (applied)."""

    def drain(self, names: Sequence[str], reason: str) -> str | None: ...

    def resume(self, names: Sequence[str]) -> str | None: ...


class GuardedSlurm:
    """Drain and resume through the shared guardrails (``opsctl.drain.plan_drain/plan_resume``:
    partition share limit, never taking over a foreign drain) and the shared audit log.

    The reason is set exactly as policy made it (``opsctl:<code>:<evidence>``). The guardrails
    count on the pass's Slurm snapshot, which each applied drain and resume updates; without one
    (``snapshot=None``) every action reads the nodes first."""

    def __init__(self, backend: SlurmBackend, config: Config, who: str = "opsctl health",
                 snapshot: SlurmSnapshot | None = None) -> None:
        self.backend = backend
        self.config = config
        self.snapshot = snapshot
        self._audit = AuditLog(config.audit.log)
        self.who = who
        self.why = "failing health check" if who == "opsctl health" else "failed node"

    def _log(
        self, action: str, names: Sequence[str], result: str, reason: str = "", detail: str = ""
    ) -> None:
        self._audit.append(
            AuditRecord(
                action=action,
                nodes=list(names),
                result=result,
                reason=reason,
                detail=f"{self.who}: {detail}".strip(),
            )
        )

    def drain(self, names: Sequence[str], reason: str) -> str:
        return self._drain_nodes(names, reason, past_guardrail=False)

    def drain_past_guardrail(self, names: Sequence[str], reason: str) -> str:
        """A fatal-class drain policy allowed under ``[health] fatal_max_drains``: the partition share
        limit does not refuse it (audited with the limit it passed); foreign drains are still never
        taken over."""
        return self._drain_nodes(names, reason, past_guardrail=True)

    def _drain_nodes(self, names: Sequence[str], reason: str, past_guardrail: bool) -> str:
        self._audit.check_writable()
        plan = drain.plan_drain(
            self._nodes(), list(names), self.config.guardrails, self.config.slurm.partition
        )
        why = self.why
        if plan.refusal and not past_guardrail:
            self._log("drain", names, "refused", reason, plan.refusal)
            raise Refused(plan.refusal)
        if plan.refusal:
            why += (f"; fatal-class fault drained past the drain guardrail ([health] fatal_max_drains): "
                    f"{plan.out_after} of {plan.scope_size} nodes in {plan.scope} out, "
                    f"the limit is {plan.limit}")
        if not plan.to_drain:
            self._log("drain", names, "noop", reason, "; ".join(plan.skipped.values()))
            return "noop"
        try:
            self.backend.drain(plan.to_drain, reason)
        except OpsctlError as exc:
            self._log("drain", names, "failed", reason, str(exc))
            raise
        if self.snapshot is not None:
            self.snapshot.note_drain(plan.to_drain, reason)
        self._log_applied("drain", plan.to_drain, reason, why)
        return "applied"

    def _log_applied(self, action: str, names: Sequence[str], reason: str, detail: str) -> None:
        """The audit line of an action Slurm applied; if it cannot be written, the action is
        unconfirmed (a drain's intent then waits for the next pass), never "failed"."""
        try:
            self._log(action, names, "applied", reason, detail)
        except OpsctlError as exc:
            raise ActionUnconfirmed(f"{action} applied in Slurm, but not audited: {exc}") from None

    def reconciled(self, decisions: Sequence[Decision]) -> None:
        """Audit what ``reconcile_intents`` settled: "reconciled" (latched) or "dropped". Nothing
        changes in Slurm here, so an unwritable log only leaves a note in the decision."""
        for d in decisions:
            try:
                self._log("drain", [d.node], d.result, d.reason, d.why)
            except OpsctlError as exc:
                d.why = f"{d.why}; not audited: {exc}"[:300]

    def reboot(self, names: Sequence[str], reason: str) -> str:
        """Ask Slurm to reboot nodes health drained with ``reason`` and that run no job; any other
        node is refused (a reboot never takes over someone else's node or kills a job)."""
        self._audit.check_writable()
        by_name = {n.name: n for n in self._nodes()}
        wrong = [name for name in names if not _rebootable(by_name.get(name), reason)]
        if wrong:
            why = f"not drained by health with this reason, or not idle: {', '.join(wrong)}"
            self._log("reboot", names, "refused", reason, why)
            raise Refused(f"refusing to reboot {why}")
        try:
            self.backend.reboot(list(names), reason)
        except OpsctlError as exc:
            self._log("reboot", names, "failed", reason, str(exc))
            raise
        self._log_applied("reboot", names, reason, "reboot-class fault; Slurm reboots and resumes it")
        return "applied"

    def _nodes(self) -> list[Node]:
        return self.snapshot.nodes if self.snapshot is not None else self.backend.nodes(None)

    def resume(self, names: Sequence[str]) -> str:
        self._audit.check_writable()
        plan = drain.plan_resume(self._nodes(), list(names))
        if plan.refusal:
            self._log("resume", names, "refused", "", plan.refusal)
            raise Refused(plan.refusal)
        if not plan.to_resume:
            self._log("resume", names, "noop", "", "; ".join(plan.skipped.values()))
            return "noop"
        try:
            self.backend.resume(plan.to_resume)
        except OpsctlError as exc:
            self._log("resume", names, "failed", "", str(exc))
            raise
        if self.snapshot is not None:
            self.snapshot.note_resume(plan.to_resume)
        self._log_applied("resume", plan.to_resume, "", "clean health checks, fix proven")
        return "applied"


def _rebootable(node: Node | None, reason: str) -> bool:
    return (node is not None and node.drain_flag and node.reason == reason and node.state == "idle"
            and not node.jobs and "COMPLETING" not in node.flags)


def _slurm_drain(slurm: SlurmActions, d: Decision) -> str | None:
    """A fatal allowance drain goes past the drain guardrail where the actions enforce one
    (``drain_past_guardrail``, GuardedSlurm's); actions without a guardrail simply drain."""
    past = getattr(slurm, "drain_past_guardrail", None) if d.allowance == "fatal" else None
    result: str | None = past([d.node], d.reason) if past is not None else slurm.drain([d.node], d.reason)
    return result


class DecisionLog:
    """JSONL audit of every decision with its evidence (one line per decision per pass)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, decisions: list[Decision], now: float, mode: str) -> None:
        """Every decision with something to say: healthy nodes left alone are not logged (the service
        passes every few seconds; a line per healthy node per pass would fill the disk)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                for d in decisions:
                    if d.action == "none" and not d.verdicts:
                        continue
                    fh.write(json.dumps({"time": now, "mode": mode, **d.to_json()}, sort_keys=True) + "\n")
        except OSError as exc:
            raise ConfigError(f"health audit log {self.path} is not writable: {exc.strerror}") from None


class ActionUnconfirmed(OpsctlError):
    """Slurm may have applied the action though the caller cannot record it as applied (it was
    applied and its audit line could not be written): the drain's intent waits for the next pass."""


def record_intent(state: PolicyState, d: Decision, now: float, owner: str,
                  persist: Callable[[PolicyState], None] | None) -> None:
    """Record (and with ``persist``, save) the drain before Slurm is asked for it."""
    intent = DrainIntent(d.reason, now, owner, d.code, d.signature, d.allowance or "brake", dict(d.latch))
    state.intents[d.node] = asdict(intent)
    if persist is not None:
        persist(state)


def reconcile_intents(state: PolicyState, slurm_nodes: Mapping[str, SlurmNodeView]) -> list[Decision]:
    """Settle, once, the drains earlier passes asked for and never saw confirmed. A node Slurm shows
    drained with the intent's reason was drained by us: it is latched and counted as the pass that
    asked would have (result "reconciled"). Any other node drops its intent (result "dropped"):
    not drained (the command never took effect; this pass's policy drains it again if it still
    fails, within the brake), drained by someone else since, or gone from Slurm."""
    out = []
    for node, data in sorted(state.intents.items()):
        intent = DrainIntent.from_json(data)
        sv = slurm_nodes.get(node)
        del state.intents[node]
        if sv is not None and sv.drain_flag and sv.reason == intent.reason:
            out.append(_reconciled(state, node, intent))
            continue
        if sv is None:
            why = "not a Slurm node any more"
        elif sv.drain_flag:
            why = f"drained by someone else since ({sv.reason!r}): theirs"
        else:
            why = "Slurm shows it not drained: the drain never took effect; policy decides afresh"
        out.append(Decision(node, "drain", f"drain intent dropped: {why}", intent.code, intent.reason,
                            signature=intent.signature, result="dropped", allowance=intent.allowance))
    return out


def _reconciled(state: PolicyState, node: str, intent: DrainIntent) -> Decision:
    latch = Latch.from_json(intent.latch) if intent.latch else Latch(intent.reason, intent.time, intent.code,
                                                                      "none")
    record_drain_done(state, node, latch, intent.reason, intent.owner, intent.signature, intent.allowance)
    why = ("reconciled: Slurm shows the drain an earlier pass asked for and never saw confirmed "
           f"(timed out, or not recorded); latched {latch.action}" if intent.owner == "health" else
           "reconciled: Slurm shows the drain an earlier pass asked for and never saw confirmed")
    return Decision(node, "drain", why, intent.code, intent.reason, signature=intent.signature,
                    result="reconciled", latch=asdict(latch) if intent.owner == "health" else {},
                    allowance=intent.allowance)


def reconcile(state: PolicyState, snapshot: SlurmSnapshot | None,
              actions: GuardedSlurm | None) -> list[Decision]:
    """Settle the drain intents earlier passes left (``reconcile_intents``), audited."""
    if snapshot is None or not state.intents:
        return []
    settled = reconcile_intents(state, {n.name: n for n in snapshot.nodes})
    if actions is not None:
        actions.reconciled(settled)
    return settled


def _ask_slurm(slurm: SlurmActions, d: Decision, state: PolicyState, now: float, owner: str,
               persist: Callable[[PolicyState], None] | None) -> str:
    """Drain (its intent recorded first), resume or reboot; the result word."""
    if d.action == "resume":
        return slurm.resume([d.node]) or "applied"
    if d.action == "reboot":
        reboot = getattr(slurm, "reboot", None)
        if reboot is None:
            raise Refused("these Slurm actions cannot reboot a node")
        return reboot([d.node], d.reason) or "applied"
    record_intent(state, d, now, owner, persist)
    result = _slurm_drain(slurm, d) or "applied"
    if result != "applied":
        state.intents.pop(d.node, None)  # nothing changed (already drained by someone)
    return result


def _record_done(d: Decision, state: PolicyState, now: float, owner: str, shadow: bool) -> None:
    """A drain or resume applied (or, in shadow mode, that would have been)."""
    if not shadow:
        state.slurm_changes += 1
    if d.action == "reboot":
        latch = Latch.from_json(d.latch)
        latch.reboot_asked = now
        state.set_latch(d.node, latch)
    elif d.action == "drain":
        state.intents.pop(d.node, None)
        latch = Latch.from_json(d.latch) if d.latch else Latch(d.reason, now, d.code, "none")
        latch.time = now
        record_drain_done(state, d.node, latch, d.reason, owner, d.signature, d.allowance)
    else:
        state.latches.pop(d.node, None)
        state.end_streak(d.node)


def act(
    decisions: list[Decision],
    slurm: SlurmActions | None,
    state: PolicyState,
    now: float,
    *,
    dry_run: bool,
    shadow: bool,
    retain_seconds: float = 7 * 86400.0,
    owner: str = "health",
    persist: Callable[[PolicyState], None] | None = None,
) -> list[Decision]:
    """Carry out drain/resume/reboot decisions and record them in ``state`` (the shadow state in shadow
    mode, where nothing else changes); dry-run records nothing. Each drain's intent is recorded in
    ``state`` (and saved through ``persist``) before Slurm is asked: a drain whose command timed out
    is "unconfirmed" and the next pass reconciles it (``reconcile_intents``)."""
    for d in decisions:
        if d.action not in ("drain", "resume", "reboot"):
            d.result = "noop"
            if d.action == "hold" and d.latch and not dry_run and owner == "health":
                state.set_latch(d.node, Latch.from_json(d.latch))  # a fatal node left in service
            continue
        if dry_run or (slurm is None and not shadow):
            d.result = "dry-run"
            continue
        try:
            if shadow:
                d.result = "shadow"
            elif slurm is not None:
                d.result = _ask_slurm(slurm, d, state, now, owner, persist)
            if d.result in ("applied", "shadow"):
                _record_done(d, state, now, owner, shadow)
        except Refused as exc:  # the shared guardrails said no: nothing changed for this node
            state.intents.pop(d.node, None)
            d.result = "refused"
            d.why = f"{d.why}; {exc}"[:300]
        except (Unreachable, ActionUnconfirmed) as exc:  # Slurm may have applied it
            _unconfirmed(d, state, exc)
        except Exception as exc:  # one node's failure must not stop the others; it is recorded
            state.intents.pop(d.node, None)
            d.result = "failed"
            d.why = f"{d.why}; {type(exc).__name__}: {exc}"[:300]
    # forget drains older than any window we could still be asked about (brake, escalation)
    state.drains = [x for x in state.drains if now - float(x.get("time", 0)) < retain_seconds]
    return decisions


def _unconfirmed(d: Decision, state: PolicyState, exc: Exception) -> None:
    """No answer, or no record: Slurm may have applied the action. A drain keeps its intent for the
    next pass to reconcile; a resume is judged again by the next pass from what Slurm shows."""
    state.slurm_changes += 1
    d.result = "unconfirmed" if d.action == "drain" else "failed"
    then = "; Slurm may have applied it: the next pass latches it if so" if d.action == "drain" else ""
    d.why = f"{d.why}; {type(exc).__name__}: {exc}{then}"[:300]


def write_log(log: DecisionLog, decisions: list[Decision], now: float, mode: str) -> None:
    """The decision log; if it cannot be written after Slurm was changed, the error says what was
    changed (exit 3, not the "nothing applied" of a configuration error)."""
    try:
        log.write(decisions, now, mode)
    except ConfigError as exc:
        changed = [f"{d.action} {d.node} ({d.result})" for d in decisions
                   if d.result in ("applied", "unconfirmed", "reconciled")]
        if not changed:
            raise
        raise OpsctlError(f"{exc}; Slurm was changed all the same, and the state file records it: "
                          f"{', '.join(changed)}", exit_code=EXIT_UNKNOWN) from None
