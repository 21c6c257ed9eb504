"""One remediation pass: the only sequence that decides and acts, for every caller.

``remediation_pass`` takes judged node reports and does lock -> load the state -> (health's probe
streaks and evidence clocks) -> read Slurm -> settle earlier drain intents -> decide -> (dcgmi diag
before a resume) -> act -> save the state -> write the decision log. ``opsctl health --remediate``
and the remediation service (``opsctl.health.service.run_health``), the watcher and preflight's
``--remediate`` (``drain_failed_nodes``) all call it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport, judge
from opsctl.checks.settings import HealthSection, PolicyConfig, health_ssh_settings
from opsctl.config import Config
from opsctl.drain import drain_limit
from opsctl.errors import ConfigError
from opsctl.evidence.base import Source
from opsctl.nodeset import fold, node_sorted
from opsctl.remediation.actions import DecisionLog, GuardedSlurm, act, reconcile, write_log
from opsctl.remediation.policy import Decision, SlurmNodeView, decide
from opsctl.remediation.state import PolicyState, locked, read_state
from opsctl.remediation.unknown import judge_on_state
from opsctl.slurm.base import SlurmBackend
from opsctl.slurm.snapshot import SlurmSnapshot, partition_size


@dataclass
class PassRequest:
    """What one pass decides on, and how it may act."""

    reports: list[NodeReport]  # judged
    nodes: list[str]  # the nodes the pass is about (Slurm's view of them is what policy reads)
    now: float
    owner: str = "health"  # who drains: health (latches and resumes) or watch (never resumed)
    mode: str = "apply"  # apply | dry-run (changes nothing) | shadow (changes only the shadow state)
    # node -> required checks it lacks while other nodes have them (health's evidence clocks and
    # probe streaks are kept in the state); None: the reports are final (the watcher's failed nodes)
    lacking: Mapping[str, Sequence[str]] | None = None
    refusal: str = ""  # why remediation must not act on this evidence (a page, nothing else)
    snapshot: SlurmSnapshot | None = None  # a read made before the lock: reused if Slurm is unchanged
    # decide knows the room the drain guardrail leaves (health's); False: the guardrail refuses
    # in act instead (the watcher's drains are audited as refused)
    guard_room: bool = True


@dataclass
class PassOutcome:
    decisions: list[Decision]
    # Slurm as the pass read it, with its own drains and resumes applied (None: not read)
    snapshot: SlurmSnapshot | None = None


@dataclass
class PassActors:
    """Where a pass acts: the ``[health]`` settings, opsctl.toml (guardrails, audit, partition) and
    the Slurm backend (None when it could not be set up: ``slurm_error`` says why)."""

    health: HealthSection
    config: Config | None
    slurm: SlurmBackend | None
    slurm_error: str = ""


def remediation_pass(req: PassRequest, on: PassActors, diag_source: Source | None = None) -> PassOutcome:
    """The pass, under the state file's lock (the shadow state's in shadow mode)."""
    h, dry_run = on.health, req.mode == "dry-run"
    cfg = h.policy()
    state_file = shadow_state_file(h.state_file) if req.mode == "shadow" else h.state_file
    log = DecisionLog(h.decision_log)
    with locked(state_file):
        state = PolicyState.load(state_file)
        # evidence-lost FAILs before decide; its unknown alerts after (a refusal's page stands alone)
        unknown = ([] if req.lacking is None else
                   judge_on_state(req.reports, req.lacking, state, cfg, req.now, count=not dry_run))
        if req.refusal:
            why = f"remediation refused: {req.refusal}"
            decisions = [Decision(fold(req.nodes), "alert", why, "coverage")]
            log.write(decisions, req.now, req.mode)
            if not dry_run:
                state.save(state_file)
            return PassOutcome(decisions)
        outcome = _decide_and_act(req, on, state, state_file, diag_source, unknown)
        if not dry_run:  # saved first: the latches of applied drains outlive a failing log
            state.save(state_file)
        write_log(log, outcome.decisions, req.now, req.mode)
    return outcome


def _decide_and_act(req: PassRequest, on: PassActors, state: PolicyState, state_file: str,
                    diag_source: Source | None, unknown: list[Decision]) -> PassOutcome:
    """Read Slurm (as of the lock), settle earlier intents, decide, then act (``state_file``: where
    ``act`` saves each drain's intent); the decisions in node order after the settled intents."""
    h, cfg, dry_run = on.health, on.health.policy(), req.mode == "dry-run"
    # Slurm as of the lock: the snapshot read before, unless another process drained or resumed
    # since (then read again); a dry run without Slurm shows what would happen to nodes in service
    snapshot = (fresh_slurm(on.slurm, h.state_file, req.snapshot, on.slurm_error)
                if on.slurm is not None or not dry_run else None)
    view: dict[str, SlurmNodeView] = (
        slurm_nodes(snapshot, req.nodes) if snapshot is not None else {n: _NodeView(n) for n in req.nodes})
    actions = (GuardedSlurm(on.slurm, on.config, who=f"opsctl {req.owner}", snapshot=snapshot)
               if on.slurm is not None and on.config is not None else None)
    settled = reconcile(state, snapshot, actions) if req.mode == "apply" else []
    if req.mode == "shadow":
        view = _shadow_view(view, state)
    size, room = _partition(on.config, snapshot, len(req.nodes))
    decisions = decide(req.reports, view, state, cfg, req.now, size, owner=req.owner,
                       guard_room=room if req.guard_room else None) + unknown
    if h.resume_diag_level and not dry_run and diag_before_resume(h, decisions, view, req.now, diag_source):
        snapshot = _after_diag(on, actions)
    act(decisions, actions, state, req.now, dry_run=dry_run, shadow=req.mode == "shadow",
        retain_seconds=_retain(cfg), owner=req.owner,
        persist=None if dry_run else (lambda s: s.save(state_file)))
    return PassOutcome(settled + in_node_order(decisions), snapshot)


def _retain(cfg: PolicyConfig) -> float:
    """How long the state keeps a drain: past any window it can still be asked about."""
    return max(7 * 86400.0, cfg.escalate_window, cfg.window_seconds)


def diag_before_resume(
    health: HealthSection,
    decisions: list[Decision],
    view: dict[str, SlurmNodeView],
    now: float,
    source: Source | None = None,
) -> bool:
    """``[health] resume_diag_level``: before a drained node is resumed, run ``dcgmi diag -r N`` on
    it (only while it is idle: the diagnostic takes the GPUs) and keep it drained unless DCGM's
    verdicts are clean. Turns the resume decisions it cannot confirm into ``keep``. Whether a
    diagnostic ran."""
    level = health.resume_diag_level
    resumes = [d for d in decisions if d.action == "resume"]
    idle = [d.node for d in resumes if (v := view.get(d.node)) is not None and v.state == "idle"]
    for d in resumes:
        if d.node not in idle:
            d.action, d.why = "keep", f"{d.why}; waits for the node to be idle to run dcgmi diag -r {level}"
    if not idle:
        return False
    if source is None:
        from opsctl.evidence.dcgm import DcgmSource

        source = DcgmSource(health_ssh_settings(health), diag_level=level)
    thresholds = health.load_thresholds()
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


# -- Slurm as the pass sees it ------------------------------------------------------------------
def read_slurm(backend: SlurmBackend | None, state_file: str, why_none: str = "") -> SlurmSnapshot:
    """One read of Slurm (nodes, and the jobs on them) for a pass, stamped with the remediation
    state's change count as it was before the read (``fresh_slurm`` compares it under the lock)."""
    if backend is None:
        raise ConfigError(f"remediation needs Slurm: {why_none or 'no Slurm backend configured'}")
    return SlurmSnapshot.read(backend, read_state(state_file).slurm_changes)


def fresh_slurm(backend: SlurmBackend | None, state_file: str, snapshot: SlurmSnapshot | None,
                why_none: str = "") -> SlurmSnapshot:
    """The pass's snapshot, under the state's lock: the one read before collecting, unless another
    remediation process (health, the watcher) drained or resumed since; else a new read."""
    changes = read_state(state_file).slurm_changes
    if snapshot is not None and snapshot.generation == changes:
        return snapshot
    return read_slurm(backend, state_file, why_none)


def slurm_nodes(snapshot: SlurmSnapshot, names: list[str] | None) -> dict[str, SlurmNodeView]:
    """The named nodes of the snapshot (UsageError naming unknown ones)."""
    return {n.name: n for n in snapshot.select(names)}


def _partition(config: Config | None, snapshot: SlurmSnapshot | None,
               fallback: int) -> tuple[int, int | None]:
    """The partition's size, and how many more of its nodes the drain guardrail lets out of service
    (None without Slurm or a config: the guardrail is not applied then)."""
    if snapshot is None:
        return fallback, None
    partition = config.slurm.partition if config is not None else None
    nodes = snapshot.in_partition(partition)
    size = partition_size(snapshot.nodes, partition) or fallback
    if config is None or not nodes:
        return size, None
    return size, drain_limit(size, config.guardrails) - sum(1 for n in nodes if n.out_of_service)


def _after_diag(on: PassActors, actions: GuardedSlurm | None) -> SlurmSnapshot | None:
    """dcgmi diag held the pass for minutes: the resumes' guardrail reads Slurm again."""
    if on.slurm is None:
        return None
    snapshot = read_slurm(on.slurm, on.health.state_file, on.slurm_error)
    if actions is not None:
        actions.snapshot = snapshot
    return snapshot


@dataclass
class _NodeView:
    """A Slurm view for decide() where Slurm's own is not used: nodes in service for a dry run
    without Slurm, and nodes the shadow state drained (so a shadow run shows holds and resumes)."""

    name: str
    state: str = "idle"
    reason: str = ""
    drained: bool = False
    flags: set[str] = field(default_factory=set)

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


def in_node_order(decisions: list[Decision]) -> list[Decision]:
    """The per-node decisions in node-set order (node2 before node10), as the reports are; alerts
    (storm first, brake and escalation last) keep their places. Only the listing changes: the
    decisions were made, and acted on, in policy's own order."""
    slots = [i for i, d in enumerate(decisions) if d.action != "alert"]
    out = list(decisions)
    for i, d in zip(slots, node_sorted((decisions[i] for i in slots), key=lambda d: d.node), strict=True):
        out[i] = d
    return out


# -- the watcher's drains -------------------------------------------------------------------------
def drain_failed_nodes(
    config: Config, backend: SlurmBackend, failed: dict[str, str], run_id: str, now: float | None = None
) -> list[Decision]:
    """The watcher's drains (nodes that failed under a run), through the same pass as health: storm,
    brake (health's and watch's drains count together), ownership, the locked state and the decision
    log. Reasons are ``opsctl:watch:launch-node-failed:<why> in run <id>``; health never resumes
    them."""
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
    req = PassRequest(reports, sorted(failed), now, owner="watch", guard_room=False)
    actors = PassActors(config.section("health", HealthSection), config, backend)
    return remediation_pass(req, actors).decisions
