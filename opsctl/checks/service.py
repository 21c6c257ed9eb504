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
from opsctl.errors import ConfigError, OpsctlError, Refused, UsageError
from opsctl.evidence.base import Source
from opsctl.policy import Decision, DecisionLog, PolicyState, SlurmNodeView, act, decide
from opsctl.slurm.base import SlurmBackend

if TYPE_CHECKING:
    from opsctl.evidence.ssh import SshSettings

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

    The reason is set exactly as policy made it (``opsctl:<code>:<evidence>``)."""

    def __init__(self, backend: SlurmBackend, config: Config) -> None:
        from opsctl import drain
        from opsctl.audit import AuditLog, AuditRecord

        self.backend = backend
        self.config = config
        self._drain = drain
        self._audit = AuditLog(config.audit.log)
        self._record = AuditRecord

    def _log(
        self, action: str, names: Sequence[str], result: str, reason: str = "", detail: str = ""
    ) -> None:
        self._audit.append(
            self._record(
                action=action,
                nodes=list(names),
                result=result,
                reason=reason,
                detail=f"opsctl health: {detail}".strip(),
            )
        )

    def drain(self, names: Sequence[str], reason: str) -> None:
        self._audit.check_writable()
        plan = self._drain.plan_drain(
            self.backend.nodes(None), list(names), self.config.guardrails, self.config.slurm.partition
        )
        if plan.refusal:
            self._log("drain", names, "refused", reason, plan.refusal)
            raise Refused(plan.refusal)
        if not plan.to_drain:
            self._log("drain", names, "noop", reason, "; ".join(plan.skipped.values()))
            return
        try:
            self.backend.drain(plan.to_drain, reason)
        except OpsctlError as exc:
            self._log("drain", names, "failed", reason, str(exc))
            raise
        self._log("drain", plan.to_drain, "applied", reason, "failing health check")

    def resume(self, names: Sequence[str]) -> None:
        self._audit.check_writable()
        plan = self._drain.plan_resume(self.backend.nodes(None), list(names))
        if plan.refusal:
            self._log("resume", names, "refused", "", plan.refusal)
            raise Refused(plan.refusal)
        if not plan.to_resume:
            self._log("resume", names, "noop", "", "; ".join(plan.skipped.values()))
            return
        try:
            self.backend.resume(plan.to_resume)
        except OpsctlError as exc:
            self._log("resume", names, "failed", "", str(exc))
            raise
        self._log("resume", plan.to_resume, "applied", "", "clean health checks")


@dataclass
class HealthResult:
    reports: list[NodeReport]
    source: str
    generated_at: float
    decisions: list[Decision] = field(default_factory=list)
    mode: str = ""  # remediation mode: apply | dry-run | shadow ("" = no remediation)

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
            doc["remediation"] = {"mode": self.mode, "decisions": [d.to_json() for d in self.decisions]}
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
    """ssh_settings plus the mounts the thresholds require (health checks them, preflight does not)."""
    from dataclasses import replace

    return replace(ssh_settings(h), required_mounts=list(h.load_thresholds().get("mounts", "required")))


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


def slurm_nodes(ctx: HealthContext, names: list[str] | None) -> dict[str, SlurmNodeView]:
    if ctx.slurm is None:
        raise ConfigError(f"remediation needs Slurm: {ctx.slurm_error or 'no Slurm backend configured'}")
    return {n.name: n for n in ctx.slurm.nodes(names)}


def resolve_nodes(ctx: HealthContext, nodeset: str | None) -> list[str]:
    """The NODESET argument, else ``[health] nodes``, else every node Slurm knows."""
    if nodeset:
        return expand_nodes(nodeset)
    if ctx.health.nodes:
        return expand_nodes(ctx.health.nodes)
    if ctx.slurm is not None:
        return sorted(n.name for n in ctx.slurm.nodes(None))
    raise UsageError(f"no node set given, none in [health] nodes, and no Slurm to ask ({ctx.slurm_error})")


def _partition_size(ctx: HealthContext, fallback: int) -> int:
    if ctx.slurm is None:
        return fallback
    partition = ctx.config.slurm.partition if ctx.config is not None else None
    nodes = ctx.slurm.nodes(None)
    if partition:
        nodes = [n for n in nodes if partition in n.partitions]
    return len(nodes) or fallback


@dataclass
class _InService:
    name: str
    state: str = "idle"
    reason: str = ""

    @property
    def drain_flag(self) -> bool:
        return False


# -- the pass -------------------------------------------------------------------------------
def run_health(
    ctx: HealthContext,
    nodes: list[str],
    source: Source,
    *,
    remediate: bool = False,
    dry_run: bool = False,
    now: float | None = None,
) -> HealthResult:
    now = time.time() if now is None else now
    thresholds = ctx.health.load_thresholds()
    # collect (read-only), then judge (pure)
    evidence = source.collect(nodes, now)
    reports = judge(evidence, thresholds, now)
    result = HealthResult(reports=reports, source=source.name, generated_at=now)
    if not remediate:
        return result
    # decide (pure, on the state file), then act (the only step that changes anything)
    if ctx.slurm is not None or not dry_run:
        view = slurm_nodes(ctx, nodes)
    else:  # a dry run without Slurm: show what would happen to nodes that are in service
        view = {n: _InService(n) for n in nodes}
    state = PolicyState.load(ctx.health.state_file)
    log = DecisionLog(ctx.health.decision_log)
    partition = _partition_size(ctx, len(nodes))
    decisions = decide(reports, view, state, ctx.health.policy(), now, partition)
    mode = "dry-run" if dry_run else ("shadow" if ctx.health.shadow else "apply")
    actions = (
        GuardedSlurm(ctx.slurm, ctx.config) if ctx.slurm is not None and ctx.config is not None else None
    )
    act(decisions, actions, state, now, dry_run=dry_run, shadow=ctx.health.shadow)
    log.write(decisions, now, mode)
    if mode == "apply":
        state.save(ctx.health.state_file)
    result.decisions, result.mode = decisions, mode
    return result
