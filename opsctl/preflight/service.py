"""One preflight pass: run the discovery over SSH, build facts, judge, and ask Slurm for GRES.

SSH settings (user, key, known_hosts, parallelism, per-node timeout) are ``[health]``'s ``ssh_*``
keys, so one known_hosts file and one key serve both commands; the profile is ``[preflight]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opsctl.checks.model import Status, Verdict, worst
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import HealthSection, ssh_settings
from opsctl.config import Config
from opsctl.errors import OpsctlError, UsageError
from opsctl.evidence.ssh import NodeRun, SshSettings, run_on_nodes
from opsctl.health.service import HealthResult, expand_nodes
from opsctl.model import Node
from opsctl.preflight.collect import commands, facts_from_outputs
from opsctl.preflight.judge import SOURCE, judge_hardware, judge_numa, judge_slurm_gres
from opsctl.preflight.settings import PreflightSection
from opsctl.slurm.base import SlurmBackend


@dataclass
class PreflightContext:
    preflight: PreflightSection
    health: HealthSection
    slurm: SlurmBackend | None = None
    slurm_error: str = ""
    config: Config | None = None  # the loaded opsctl.toml (--remediate drains through it)


def load_context(config_path: str | None) -> PreflightContext:
    from opsctl.config import load_config

    cfg = load_config(config_path)
    return context_from_config(cfg)


def context_from_config(cfg: Config) -> PreflightContext:
    ctx = PreflightContext(
        cfg.section("preflight", PreflightSection), cfg.section("health", HealthSection), config=cfg
    )
    try:
        from opsctl.slurm import backend_from_config

        ctx.slurm = backend_from_config(cfg)
    except OpsctlError as exc:
        ctx.slurm_error = str(exc)
    except Exception as exc:  # a backend that cannot start only makes the GRES check UNKNOWN
        ctx.slurm_error = f"{type(exc).__name__}: {exc}"
    return ctx


def resolve_nodes(ctx: PreflightContext, nodeset: str | None) -> list[str]:
    """NODESET, else ``[preflight] nodes``, else ``[health] nodes``, else every node Slurm knows."""
    for given in (nodeset, ctx.preflight.nodes, ctx.health.nodes):
        if given:
            return expand_nodes(given)
    if ctx.slurm is not None:  # Slurm unreachable here is the pass's UNKNOWN (exit 3), as for health
        return sorted(n.name for n in ctx.slurm.nodes(None))
    raise UsageError(f"no node set given or configured, and no Slurm to ask ({ctx.slurm_error})")


def preflight_ssh_settings(ctx: PreflightContext) -> SshSettings:
    """[health]'s SSH settings with [preflight]'s addresses and IB tree over them."""
    return ssh_settings(ctx.health, ctx.preflight.addresses, ctx.preflight.ib_sysfs_root)


def _slurm_view(ctx: PreflightContext) -> tuple[dict[str, Node], str]:
    if ctx.slurm is None:
        return {}, ctx.slurm_error or "no Slurm backend configured"
    try:
        return {n.name: n for n in ctx.slurm.nodes(None)}, ""
    except OpsctlError as exc:
        return {}, str(exc)[:200]
    except Exception as exc:  # Slurm's trouble is the GRES check's UNKNOWN, never the pass's
        return {}, f"{type(exc).__name__}: {exc}"[:200]


def node_report(
    ctx: PreflightContext, run: NodeRun, slurm: dict[str, Node], slurm_error: str
) -> tuple[NodeReport, dict[str, Any] | None]:
    """The discovery's verdicts for one node, and its ``hw`` fact (None when it could not be read)."""
    p = ctx.preflight
    facts = facts_from_outputs(run.node, run.outputs) if not run.error else None
    if facts is None or facts.hw is None:
        why = run.error or (facts.error if facts else "") or "no evidence"
        v = Verdict(
            "evidence", Status.UNKNOWN, run.node, None, why, {"source": SOURCE, "short": "no evidence"}
        )
        return NodeReport(run.node, Status.UNKNOWN, [v], SOURCE), None
    hw = facts.hw
    verdicts = judge_hardware(run.node, hw, p.expected())
    verdicts.extend(judge_numa(run.node, hw, p.ib_hcas))
    if p.slurm_gres:
        verdicts.append(judge_slurm_gres(run.node, hw, slurm.get(run.node), slurm_error))
    return NodeReport(run.node, worst([v.status for v in verdicts]), verdicts, SOURCE), hw


def slurm_view(ctx: PreflightContext, runs: list[NodeRun]) -> tuple[dict[str, Node], str]:
    """Slurm's nodes, asked once and only when some node answered (for GRES and idleness)."""
    if any(not r.error for r in runs):
        return _slurm_view(ctx)
    return {}, "no node reachable"


def run_preflight(ctx: PreflightContext, nodes: list[str], *, now: float | None = None) -> HealthResult:
    now = time.time() if now is None else now
    ssh = preflight_ssh_settings(ctx)
    runs = run_on_nodes(ssh, nodes, commands(ssh.ib_sysfs_root))
    slurm, slurm_error = slurm_view(ctx, runs) if ctx.preflight.slurm_gres else ({}, "")
    reports = [node_report(ctx, run, slurm, slurm_error)[0] for run in runs]
    reports.sort(key=lambda r: r.node)
    return HealthResult(reports=reports, source=SOURCE, generated_at=now)
