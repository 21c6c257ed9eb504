"""One health pass: collect (a source) -> judge (the catalogue) -> remediate (one pass of
``opsctl.remediation.passes``).

The click command is a thin shell over :func:`run_health`; the remediation service runs it with
``remediate=True`` every interval. Configuration comes from ``opsctl.config`` (with ``[health]``
registered as a section); Slurm access from ``opsctl.slurm``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from opsctl.checks.model import Status
from opsctl.checks.runner import NodeReport, judge
from opsctl.checks.settings import HealthSection, health_ssh_settings
from opsctl.config import Config
from opsctl.errors import OpsctlError, SourceUnreachable, Unreachable, UsageError
from opsctl.evidence.base import Source
from opsctl.evidence.model import Evidence
from opsctl.remediation.passes import (
    PassActors,
    PassRequest,
    read_slurm,
    remediation_pass,
    shadow_state_file,
)
from opsctl.remediation.policy import Decision
from opsctl.remediation.state import read_state
from opsctl.remediation.unknown import judge_on_state, lacking_required, remediation_refusal
from opsctl.slurm.base import SlurmBackend
from opsctl.slurm.snapshot import SlurmSnapshot

EXIT_BY_STATUS = {"OK": 0, "WARN": 0, "FAIL": 1, "UNKNOWN": 3}



@dataclass
class HealthContext:
    """Everything a pass needs, resolved from configuration."""

    health: HealthSection
    prometheus_url: str = "http://127.0.0.1:9090"
    slurm: SlurmBackend | None = None  # from [slurm]; None when it could not be set up
    slurm_error: str = ""
    config: Config | None = None  # the loaded opsctl.toml (guardrails, audit, partition)


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

        return SshSource(health_ssh_settings(h))
    if name == "dcgm":
        from opsctl.evidence.dcgm import DcgmSource

        return DcgmSource(health_ssh_settings(h), diag_level=h.dcgm_diag_level)
    raise UsageError(f"unknown source {name!r}; use prometheus, ssh, dcgm or prometheus+ssh")


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


def pass_slurm(ctx: HealthContext) -> SlurmSnapshot:
    """One read of Slurm for a pass (``opsctl.remediation.passes.read_slurm``)."""
    return read_slurm(ctx.slurm, ctx.health.state_file, ctx.slurm_error)



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

        snapshot = pass_slurm(ctx)
        return PassNodes(node_sorted(snapshot.names()), snapshot)
    raise UsageError(f"no node set given, none in [health] nodes, and no Slurm to ask ({ctx.slurm_error})")


def resolve_nodes(ctx: HealthContext, nodeset: str | None) -> list[str]:
    """The NODESET argument, else ``[health] nodes``, else every node Slurm knows."""
    return pass_nodes(ctx, nodeset).names


def collect(source: Source, nodes: list[str], now: float) -> list[Evidence]:
    """The source's evidence; a source that cannot run at all is :class:`SourceUnreachable` (the
    remediation service pages when that lasts)."""
    try:
        return source.collect(nodes, now)
    except SourceUnreachable:
        raise
    except Unreachable as exc:
        raise SourceUnreachable(str(exc), exit_code=exc.exit_code) from exc


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
    # collect (read-only), then judge (pure)
    evidence = collect(source, nodes, now)
    reports = judge(evidence, thresholds, now)
    lacking = lacking_required(evidence, h.required_checks)
    result = HealthResult(reports=reports, source=source.name, generated_at=now)
    mode = "dry-run" if dry_run else ("shadow" if h.shadow else "apply")
    if not remediate:
        # probes that keep timing out FAIL; a plain pass reads the streaks the service keeps
        state = read_state(shadow_state_file(h.state_file) if mode == "shadow" else h.state_file)
        judge_on_state(reports, lacking, state, h.policy(), now, count=False)
        return result
    # decide and act: the one remediation pass
    refusal = remediation_refusal(evidence, h.required_checks)
    req = PassRequest(reports, nodes, now, mode=mode, lacking=lacking, refusal=refusal, snapshot=slurm)
    outcome = remediation_pass(req, PassActors(h, ctx.config, ctx.slurm, ctx.slurm_error))
    result.decisions, result.slurm = outcome.decisions, outcome.snapshot
    result.mode, result.refusal = mode, refusal
    return result
