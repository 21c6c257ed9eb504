"""One health pass: collect (a source) -> judge (the catalogue) -> decide (policy) -> act.

The click command is a thin shell over :func:`run_health`. Configuration comes from
``opsctl.config`` (with ``[health]`` registered as a section); Slurm access from ``opsctl.slurm``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opsctl.checks.model import Status
from opsctl.checks.runner import NodeReport, judge
from opsctl.checks.settings import HealthSection
from opsctl.config import Config
from opsctl.errors import (
    EXIT_UNKNOWN,
    ConfigError,
    OpsctlError,
    Refused,
    SourceUnreachable,
    Unreachable,
    UsageError,
)
from opsctl.evidence.base import Source
from opsctl.evidence.model import Evidence
from opsctl.policy import (
    ActionUnconfirmed,
    Decision,
    DecisionLog,
    PolicyConfig,
    PolicyState,
    SlurmNodeView,
    act,
    decide,
    judge_unknown,
    locked,
    probe_verdicts,
    reconcile_intents,
)
from opsctl.slurm.base import SlurmBackend
from opsctl.slurm.snapshot import SlurmSnapshot

if TYPE_CHECKING:
    from opsctl.evidence.ssh import SshSettings
    from opsctl.model import Node

EXIT_BY_STATUS = {"OK": 0, "WARN": 0, "FAIL": 1, "UNKNOWN": 3}


@dataclass
class HealthContext:
    """Everything a pass needs, resolved from configuration."""

    health: HealthSection
    prometheus_url: str = "http://127.0.0.1:9090"
    slurm: SlurmBackend | None = None  # from [slurm]; None when it could not be set up
    slurm_error: str = ""
    config: Config | None = None  # the loaded opsctl.toml (guardrails, audit, partition)


class GuardedSlurm:
    """Drain and resume through the shared guardrails (``opsctl.drain.plan_drain/plan_resume``:
    partition share limit, never taking over a foreign drain) and the shared audit log.

    The reason is set exactly as policy made it (``opsctl:<code>:<evidence>``). The guardrails
    count on the pass's Slurm snapshot, which each applied drain and resume updates; without one
    (``snapshot=None``) every action reads the nodes first."""

    def __init__(self, backend: SlurmBackend, config: Config, who: str = "opsctl health",
                 snapshot: SlurmSnapshot | None = None) -> None:
        from opsctl import drain
        from opsctl.audit import AuditLog, AuditRecord

        self.backend = backend
        self.config = config
        self.snapshot = snapshot
        self._drain = drain
        self._audit = AuditLog(config.audit.log)
        self._record = AuditRecord
        self.who = who
        self.why = "failing health check" if who == "opsctl health" else "failed node"

    def _log(
        self, action: str, names: Sequence[str], result: str, reason: str = "", detail: str = ""
    ) -> None:
        self._audit.append(
            self._record(
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
        plan = self._drain.plan_drain(
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

    def _nodes(self) -> list[Node]:
        return self.snapshot.nodes if self.snapshot is not None else self.backend.nodes(None)

    def resume(self, names: Sequence[str]) -> str:
        self._audit.check_writable()
        plan = self._drain.plan_resume(self._nodes(), list(names))
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


@dataclass
class HealthResult:
    reports: list[NodeReport]
    source: str
    generated_at: float
    decisions: list[Decision] = field(default_factory=list)
    mode: str = ""  # remediation mode: apply | dry-run | shadow ("" = no remediation)
    refusal: str = ""  # why remediation refused to act in this pass ("" when it ran)
    # Slurm as the pass read it, with the pass's own drains and resumes applied (None: not read)
    slurm: SlurmSnapshot | None = None

    @property
    def status(self) -> str:
        statuses = {r.status for r in self.reports}
        if Status.FAIL in statuses:
            return "FAIL"
        if Status.UNKNOWN in statuses:
            return "UNKNOWN"
        return "WARN" if Status.WARN in statuses else "OK"

    @property
    def exit_code(self) -> int:
        return EXIT_BY_STATUS[self.status]

    def to_json(self) -> dict[str, Any]:
        counts = {s.value: sum(1 for r in self.reports if r.status is s) for s in Status}
        doc: dict[str, Any] = {
            "generated_at": self.generated_at,
            "source": self.source,
            "status": self.status,
            "counts": counts,
            "nodes": [r.to_json() for r in self.reports],
        }
        if self.mode:
            doc["remediation"] = {
                "mode": self.mode,
                "refusal": self.refusal,
                "decisions": [d.to_json() for d in self.decisions],
            }
        return doc


# -- configuration --------------------------------------------------------------------------
def load_context(config_path: str | None) -> HealthContext:
    from opsctl.config import load_config

    cfg = load_config(config_path)
    ctx = HealthContext(
        health=cfg.section("health", HealthSection), prometheus_url=cfg.prometheus.url, config=cfg
    )
    try:
        from opsctl.slurm import backend_from_config

        ctx.slurm = backend_from_config(cfg)
    except OpsctlError:
        raise
    except Exception as exc:  # a backend that cannot start is reported when it is needed
        ctx.slurm_error = f"{type(exc).__name__}: {exc}"
    return ctx


# -- sources --------------------------------------------------------------------------------
def make_source(ctx: HealthContext, name: str) -> Source:
    h = ctx.health
    if "+" in name:  # a composite: each fact from the first source that has it
        from opsctl.evidence.composite import CompositeSource

        parts = name.split("+")
        if len(set(parts)) != len(parts) or "" in parts:
            raise UsageError(f"bad composite source {name!r}; name each source once, e.g. prometheus+ssh")
        return CompositeSource([make_source(ctx, part) for part in parts])
    if name == "prometheus":
        from opsctl.evidence.prometheus import PrometheusSource

        return PrometheusSource(
            ctx.prometheus_url,
            stale_after=h.stale_after,
            window_seconds=h.window_seconds,
            xid_window_seconds=int(h.load_thresholds().get("xid", "window_seconds")),
        )
    if name == "ssh":
        from opsctl.evidence.ssh import SshSource

        return SshSource(_health_ssh_settings(h))
    if name == "dcgm":
        from opsctl.evidence.dcgm import DcgmSource

        return DcgmSource(_health_ssh_settings(h), diag_level=h.dcgm_diag_level)
    raise UsageError(f"unknown source {name!r}; use prometheus, ssh, dcgm or prometheus+ssh")


def ssh_settings(
    h: HealthSection, addresses: dict[str, str] | None = None, ib_sysfs_root: str | None = None
) -> SshSettings:
    """How the SSH-based commands (health's ssh and dcgm sources, preflight) reach nodes: `[health]`
    ssh_* keys, with addresses and the IB tree overridable by the caller (preflight's own keys)."""
    from opsctl.evidence.ssh import SshSettings, address_map

    hosts, ports = address_map({**h.ssh_addresses, **(addresses or {})})
    return SshSettings(
        user=h.ssh_user,
        port=h.ssh_port,
        key_filename=h.ssh_key,
        known_hosts=h.ssh_known_hosts,
        node_timeout=h.ssh_timeout,
        parallel=h.ssh_parallel,
        ib_sample_seconds=h.ib_sample_seconds,
        hosts=hosts,
        ports=ports,
        ib_sysfs_root=ib_sysfs_root or h.ib_sysfs_root,
    )


def _health_ssh_settings(h: HealthSection) -> SshSettings:
    """ssh_settings plus the mounts the thresholds require and the Lustre probe (health checks them,
    preflight does not)."""
    from dataclasses import replace

    return replace(
        ssh_settings(h),
        required_mounts=list(h.load_thresholds().get("mounts", "required")),
        lustre_mount=h.lustre_mount,
        lustre_nids=list(h.lustre_nids),
        lustre_write_mib=h.lustre_write_mib,
        lustre_timeout=h.lustre_timeout,
        lustre_max_write_seconds=h.lustre_max_write_seconds,
    )


# -- nodes ----------------------------------------------------------------------------------
def expand_nodes(nodeset: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError

    try:
        nodes = list(NodeSet(nodeset))
    except (NodeSetParseError, RangeSetParseError) as exc:
        raise UsageError(f"bad node set {nodeset!r}: {exc}") from None
    if not nodes:
        raise UsageError("empty node set")
    return nodes


def read_slurm(ctx: HealthContext) -> SlurmSnapshot:
    """One read of Slurm (nodes, and the jobs on them) for a pass, stamped with the remediation
    state's change count as it was before the read (``fresh_slurm`` compares it under the lock)."""
    if ctx.slurm is None:
        raise ConfigError(f"remediation needs Slurm: {ctx.slurm_error or 'no Slurm backend configured'}")
    return SlurmSnapshot.read(ctx.slurm, _read_state(ctx.health.state_file).slurm_changes)


def fresh_slurm(ctx: HealthContext, snapshot: SlurmSnapshot | None) -> SlurmSnapshot:
    """The pass's snapshot, under the state's lock: the one read before collecting, unless another
    remediation process (health, the watcher) drained or resumed since; else a new read."""
    changes = _read_state(ctx.health.state_file).slurm_changes
    if snapshot is not None and snapshot.generation == changes:
        return snapshot
    return read_slurm(ctx)


def slurm_nodes(snapshot: SlurmSnapshot, names: list[str] | None) -> dict[str, SlurmNodeView]:
    """The named nodes of the snapshot (UsageError naming unknown ones)."""
    return {n.name: n for n in snapshot.select(names)}


@dataclass
class PassNodes:
    """The nodes a pass checks, and the Slurm read that listed them (the pass reuses it)."""

    names: list[str]
    slurm: SlurmSnapshot | None = None


def pass_nodes(ctx: HealthContext, nodeset: str | None) -> PassNodes:
    """The NODESET argument, else ``[health] nodes``, else every node Slurm knows (one read)."""
    if nodeset:
        return PassNodes(expand_nodes(nodeset))
    if ctx.health.nodes:
        return PassNodes(expand_nodes(ctx.health.nodes))
    if ctx.slurm is not None:
        from opsctl.nodeset import node_sorted

        snapshot = read_slurm(ctx)
        return PassNodes(node_sorted(snapshot.names()), snapshot)
    raise UsageError(f"no node set given, none in [health] nodes, and no Slurm to ask ({ctx.slurm_error})")


def resolve_nodes(ctx: HealthContext, nodeset: str | None) -> list[str]:
    """The NODESET argument, else ``[health] nodes``, else every node Slurm knows."""
    return pass_nodes(ctx, nodeset).names


def _partition(ctx: HealthContext, fallback: int, snapshot: SlurmSnapshot | None) -> tuple[int, int | None]:
    """The partition's size, and how many more of its nodes the drain guardrail lets out of service
    (None without Slurm or a config: the guardrail is not applied then)."""
    if snapshot is None:
        return fallback, None
    nodes = snapshot.in_partition(ctx.config.slurm.partition if ctx.config is not None else None)
    if ctx.config is None or not nodes:
        return len(nodes) or fallback, None
    from opsctl.drain import drain_limit

    room = drain_limit(len(nodes), ctx.config.guardrails) - sum(1 for n in nodes if n.out_of_service)
    return len(nodes), room


@dataclass
class _NodeView:
    """A Slurm view for decide() where Slurm's own is not used: nodes in service for a dry run
    without Slurm, and nodes the shadow state drained (so a shadow run shows holds and resumes)."""

    name: str
    state: str = "idle"
    reason: str = ""
    drained: bool = False

    @property
    def drain_flag(self) -> bool:
        return self.drained


def shadow_state_file(state_file: str) -> str:
    """Shadow mode keeps its own state beside the real one and never touches the real one."""
    base, dot, ext = state_file.rpartition(".")
    return f"{base}.shadow.{ext}" if dot and "/" not in ext else f"{state_file}.shadow"


def _shadow_view(view: dict[str, SlurmNodeView], state: PolicyState) -> dict[str, SlurmNodeView]:
    out: dict[str, SlurmNodeView] = dict(view)
    for node, data in state.latches.items():
        real = view.get(node)
        if real is not None and not real.drain_flag and not data.get("in_service"):
            out[node] = _NodeView(node, real.state, str(data.get("reason", "")), drained=True)
    return out


def remediation_refusal(evidence: Sequence[Evidence], required: Sequence[str]) -> str:
    """Why remediation must not act on this evidence ("" when it may): XIDs known only by their last
    value (a later harmless XID hides a fatal one), or a required check that no node has evidence
    for (the source cannot see that class of fault). With no node readable at all there is nothing
    to act on and nothing to refuse: every node is UNKNOWN."""
    from opsctl.checks.coverage import coverage
    from opsctl.nodeset import fold

    if not any(ev.reachable for ev in evidence):
        return ""
    cov = coverage(evidence, required)
    if cov.last_value_xids:
        return (
            f"XIDs on {fold(cov.xid_modes['last-value'])} are known only by their last value "
            "(DCGM_FI_DEV_XID_ERRORS): a later harmless XID hides a fatal one; enable "
            "DCGM_EXP_XID_ERRORS_COUNT in the dcgm-exporter counters"
        )
    if cov.missing_required:
        return (
            f"no evidence for required check(s) {', '.join(cov.missing_required)} from this source "
            "([health] required_checks; opsctl health --coverage lists what it can see)"
        )
    return ""


def collect(source: Source, nodes: list[str], now: float) -> list[Evidence]:
    """The source's evidence; a source that cannot run at all is :class:`SourceUnreachable` (the
    remediation service pages when that lasts)."""
    try:
        return source.collect(nodes, now)
    except SourceUnreachable:
        raise
    except Unreachable as exc:
        raise SourceUnreachable(str(exc), exit_code=exc.exit_code) from exc


def lacking_required(evidence: Sequence[Evidence], required: Sequence[str]) -> dict[str, list[str]]:
    """Node -> the required checks it has no evidence for while other nodes do (evidence-lost's
    clocks); a check no node has evidence for is not in it (the source, not the node)."""
    from opsctl.checks.coverage import coverage

    if not any(ev.reachable for ev in evidence):
        return {}
    return coverage(evidence, required).nodes_lacking_required


def _retain(cfg: PolicyConfig) -> float:
    return max(7 * 86400.0, cfg.escalate_window, cfg.window_seconds)


# -- the pass -------------------------------------------------------------------------------
def run_health(
    ctx: HealthContext,
    nodes: list[str],
    source: Source,
    *,
    remediate: bool = False,
    dry_run: bool = False,
    now: float | None = None,
    slurm: SlurmSnapshot | None = None,
) -> HealthResult:
    """One pass over ``nodes``. ``slurm``: the read that listed them (``pass_nodes``), reused when
    no other remediation process changed Slurm since; a remediating pass reads Slurm once."""
    now = time.time() if now is None else now
    h = ctx.health
    thresholds = h.load_thresholds()
    cfg = h.policy()
    # collect (read-only), then judge (pure)
    evidence = collect(source, nodes, now)
    reports = judge(evidence, thresholds, now)
    lacking = lacking_required(evidence, h.required_checks)
    result = HealthResult(reports=reports, source=source.name, generated_at=now)
    mode = "dry-run" if dry_run else ("shadow" if h.shadow else "apply")
    state_file = shadow_state_file(h.state_file) if mode == "shadow" else h.state_file
    if not remediate:
        # probes that keep timing out FAIL; a plain pass reads the streaks the service keeps
        state = _read_state(state_file)
        for r in reports:
            probe_verdicts(r, state, cfg, count=False)
        judge_unknown(reports, lacking, state, cfg, now, count=False)
        return result
    # decide (pure, on the locked state file), then act (the only step that changes anything)
    log = DecisionLog(h.decision_log)
    with locked(state_file):
        state = PolicyState.load(state_file)
        for r in reports:
            probe_verdicts(r, state, cfg, count=not dry_run)
        # evidence-lost FAILs before decide; its unknown alerts after (a refusal's page stands alone)
        unknown = judge_unknown(reports, lacking, state, cfg, now, count=not dry_run)
        refusal = remediation_refusal(evidence, h.required_checks)
        if refusal:
            from opsctl.nodeset import fold

            result.decisions = [Decision(fold(nodes), "alert", f"remediation refused: {refusal}", "coverage")]
            result.refusal, result.mode = refusal, mode
            log.write(result.decisions, now, mode)
            if not dry_run:
                state.save(state_file)
            return result
        # Slurm as of the lock: the snapshot read before collecting, unless another process
        # drained or resumed since (then read again)
        snapshot = fresh_slurm(ctx, slurm) if ctx.slurm is not None or not dry_run else None
        # (a dry run without Slurm: show what would happen to nodes that are in service)
        view: dict[str, SlurmNodeView] = (
            slurm_nodes(snapshot, nodes) if snapshot is not None else {n: _NodeView(n) for n in nodes})
        actions = (GuardedSlurm(ctx.slurm, ctx.config, snapshot=snapshot)
                   if ctx.slurm is not None and ctx.config is not None else None)
        settled = _reconcile(state, snapshot, actions) if mode == "apply" else []
        if mode == "shadow":
            view = _shadow_view(view, state)
        partition, room = _partition(ctx, len(nodes), snapshot)
        decisions = decide(reports, view, state, cfg, now, partition, guard_room=room) + unknown
        if h.resume_diag_level and not dry_run and diag_before_resume(ctx, decisions, view, now):
            snapshot = _after_diag(ctx, actions)
        act(decisions, actions, state, now, dry_run=dry_run, shadow=mode == "shadow",
            retain_seconds=_retain(cfg), persist=None if dry_run else (lambda s: s.save(state_file)))
        decisions = settled + in_node_order(decisions)
        if not dry_run:  # saved first: the latches of applied drains outlive a failing log
            state.save(state_file)
        _write_log(log, decisions, now, mode)
    result.decisions, result.mode, result.slurm = decisions, mode, snapshot
    return result


def _reconcile(state: PolicyState, snapshot: SlurmSnapshot | None,
               actions: GuardedSlurm | None) -> list[Decision]:
    """Settle the drain intents earlier passes left (``reconcile_intents``), audited."""
    if snapshot is None or not state.intents:
        return []
    settled = reconcile_intents(state, {n.name: n for n in snapshot.nodes})
    if actions is not None:
        actions.reconciled(settled)
    return settled


def _after_diag(ctx: HealthContext, actions: GuardedSlurm | None) -> SlurmSnapshot | None:
    """dcgmi diag held the pass for minutes: the resumes' guardrail reads Slurm again."""
    if ctx.slurm is None:
        return None
    snapshot = read_slurm(ctx)
    if actions is not None:
        actions.snapshot = snapshot
    return snapshot


def _write_log(log: DecisionLog, decisions: list[Decision], now: float, mode: str) -> None:
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


def in_node_order(decisions: list[Decision]) -> list[Decision]:
    """The per-node decisions in node-set order (node2 before node10), as the reports are; alerts
    (storm first, brake and escalation last) keep their places. Only the listing changes: the
    decisions were made, and acted on, in policy's own order."""
    from opsctl.nodeset import node_sorted

    slots = [i for i, d in enumerate(decisions) if d.action != "alert"]
    out = list(decisions)
    for i, d in zip(slots, node_sorted((decisions[i] for i in slots), key=lambda d: d.node), strict=True):
        out[i] = d
    return out


def diag_before_resume(
    ctx: HealthContext,
    decisions: list[Decision],
    view: dict[str, SlurmNodeView],
    now: float,
    source: Source | None = None,
) -> bool:
    """``[health] resume_diag_level``: before a drained node is resumed, run ``dcgmi diag -r N`` on
    it (only while it is idle: the diagnostic takes the GPUs) and keep it drained unless DCGM's
    verdicts are clean. Turns the resume decisions it cannot confirm into ``keep``. Whether a
    diagnostic ran."""
    level = ctx.health.resume_diag_level
    resumes = [d for d in decisions if d.action == "resume"]
    idle = [d.node for d in resumes if (v := view.get(d.node)) is not None and v.state == "idle"]
    for d in resumes:
        if d.node not in idle:
            d.action, d.why = "keep", f"{d.why}; waits for the node to be idle to run dcgmi diag -r {level}"
    if not idle:
        return False
    if source is None:
        from opsctl.evidence.dcgm import DcgmSource

        source = DcgmSource(_health_ssh_settings(ctx.health), diag_level=level)
    thresholds = ctx.health.load_thresholds()
    verdicts = {r.node: r for r in judge(source.collect(idle, now), thresholds, now)}
    for d in resumes:
        if d.node not in idle:
            continue
        report = verdicts.get(d.node)
        bad = [v for v in report.verdicts if v.status is not Status.OK] if report is not None else []
        if report is None or report.status not in (Status.OK, Status.WARN):
            summary = "; ".join(v.summary for v in bad[:2]) or "no result"
            d.action, d.why = "keep", f"{d.why}; dcgmi diag -r {level} before resume: {summary}"[:300]
        else:
            d.why = f"{d.why}; dcgmi diag -r {level} passed"
    return True


def _read_state(path: str) -> PolicyState:
    try:
        return PolicyState.load(path)
    except ConfigError:
        return PolicyState()  # a plain health pass never fails on remediation's state


def drain_failed_nodes(
    config: Config, backend: SlurmBackend, failed: dict[str, str], run_id: str, now: float | None = None
) -> list[Decision]:
    """The watcher's drains (nodes that failed under a run), through the same decision path as
    health: storm, brake (health's and watch's drains count together), ownership, the locked state
    and the decision log. Reasons are ``opsctl:watch:launch-node-failed:<why> in run <id>``; health
    never resumes them."""
    from opsctl.checks.model import Verdict

    h = config.section("health", HealthSection)
    cfg = h.policy()
    now = time.time() if now is None else now
    reports = [
        NodeReport(
            node,
            Status.FAIL,
            [
                Verdict(
                    "launch-node-failed",
                    Status.FAIL,
                    node,
                    None,
                    f"{why} in run {run_id}",
                    {"short": f"{why} in run {run_id}", "action": "none"},
                )
            ],
            "watch",
        )
        for node, why in sorted(failed.items())
    ]
    with locked(h.state_file):
        state = PolicyState.load(h.state_file)
        snapshot = SlurmSnapshot.read(backend)  # one read: the view, the size, the guardrail's count
        view = slurm_nodes(snapshot, sorted(failed))
        size = len(snapshot.in_partition(config.slurm.partition)) or len(snapshot.nodes)
        actions = GuardedSlurm(backend, config, who="opsctl watch", snapshot=snapshot)
        settled = _reconcile(state, snapshot, actions)
        decisions = decide(reports, view, state, cfg, now, size, owner="watch")
        act(decisions, actions, state, now, dry_run=False, shadow=False, retain_seconds=_retain(cfg),
            owner="watch", persist=lambda s: s.save(h.state_file))
        decisions = settled + decisions
        state.save(h.state_file)
        _write_log(DecisionLog(h.decision_log), decisions, now, "apply")
    return decisions
