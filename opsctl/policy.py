"""Remediation policy: turn node reports into decisions (decide), then carry them out (act).

``decide`` is pure: reports + the Slurm view of the nodes + persisted state in, decisions out.
Only ``act`` changes the world (drain/resume through the Slurm backend), and it does nothing in
dry-run or shadow mode beyond writing what it would have done to the audit log.

Rules, in order:

1. Storm: when the same failure signature (check code, plus the XID for XID failures) appears on
   at least ``storm_min_nodes`` nodes and ``storm_fraction`` of the partition in one pass, the
   checker or the fabric is suspect: raise an alert and drain none of them.
2. Ownership: a node drained by anyone else (reason not starting with ``opsctl:``) is left alone,
   never re-drained, never resumed. A down node is left alone too.
3. Brake: at most ``max_drains`` nodes, and at most ``max_fraction`` of the partition, are drained
   by opsctl per ``window_seconds``; beyond that, hold and alert.
4. Resume: a node opsctl drained is resumed only after ``resume_after_clean`` consecutive passes
   in which it was OK or WARN (UNKNOWN breaks the streak), and only while its reason is still ours.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.errors import ConfigError, Refused

REASON_PREFIX = "opsctl:"
MAX_REASON = 120


class SlurmNodeView(Protocol):
    """What policy needs from a Slurm node (``opsctl.model.Node`` has all of it)."""

    name: str
    state: str
    reason: str

    @property
    def drain_flag(self) -> bool: ...


class SlurmActions(Protocol):
    def drain(self, names: Sequence[str], reason: str) -> None: ...

    def resume(self, names: Sequence[str]) -> None: ...


@dataclass
class PolicyConfig:
    max_drains: int = 2
    max_fraction: float = 0.10
    window_seconds: float = 3600.0
    storm_min_nodes: int = 3
    storm_fraction: float = 0.25
    resume_after_clean: int = 3
    shadow: bool = False

    def validate(self) -> None:
        if self.max_drains < 0 or not 0 <= self.max_fraction <= 1:
            raise ConfigError("health: max_drains must be >= 0 and max_fraction in [0, 1]")
        if self.storm_min_nodes < 2 or not 0 < self.storm_fraction <= 1:
            raise ConfigError("health: storm_min_nodes must be >= 2 and storm_fraction in (0, 1]")
        if self.resume_after_clean < 1 or self.window_seconds <= 0:
            raise ConfigError("health: resume_after_clean must be >= 1 and window_seconds > 0")


@dataclass
class Decision:
    node: str  # a node name, or a folded node set for an alert
    action: str  # drain | resume | alert | hold | keep | none
    why: str
    code: str = ""
    reason: str = ""  # the Slurm reason a drain would set
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    signature: str = ""  # failure signature (storm detection across passes)
    result: str = "pending"  # pending | applied | dry-run | shadow | failed | noop

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PolicyState:
    """Persisted between passes: opsctl's own drains (for the brake) and clean streaks."""

    drains: list[dict[str, Any]] = field(default_factory=list)  # {"node", "time", "reason"}
    clean_streak: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PolicyState:
        p = Path(path)
        if not p.exists():
            return cls()
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            return cls(drains=list(data.get("drains", [])), clean_streak=dict(data.get("clean_streak", {})))
        except (OSError, ValueError, AttributeError) as exc:
            raise ConfigError(f"health state file {p} is unreadable: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a crash never leaves half a state file
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".health-state.")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh, indent=1, sort_keys=True)
        os.replace(tmp, p)


_REASON_CHARS = re.compile(r"[^A-Za-z0-9 .,_/@%+=-]")


def drain_reason(v: Verdict) -> str:
    """``opsctl:<code>:<short evidence>``, in the plain characters the drain guardrails accept."""
    short = " ".join(_REASON_CHARS.sub(" ", v.short_evidence).split())
    return f"{REASON_PREFIX}{v.code}:{short}"[:MAX_REASON]


def signature(v: Verdict) -> str:
    xid = v.evidence.get("xid")
    return f"{v.code}:xid{xid}" if xid is not None else v.code


def _fold(nodes: list[str]) -> str:
    try:
        from ClusterShell.NodeSet import NodeSet

        return str(NodeSet.fromlist(nodes))
    except Exception:  # pragma: no cover - ClusterShell is a dependency; fall back to a plain list
        return ",".join(nodes)


def decide(
    reports: list[NodeReport],
    slurm_nodes: dict[str, SlurmNodeView],
    state: PolicyState,
    cfg: PolicyConfig,
    now: float,
    partition_size: int | None = None,
) -> list[Decision]:
    size = partition_size if partition_size is not None else max(len(slurm_nodes), len(reports))
    decisions: list[Decision] = []
    failing: dict[str, list[Verdict]] = {
        r.node: [v for v in r.verdicts if v.status is Status.FAIL] for r in reports if r.status is Status.FAIL
    }

    # 1. storms: the same signature on many nodes at once
    by_sig: dict[str, list[str]] = defaultdict(list)
    for node, verdicts in failing.items():
        for sig in sorted({signature(v) for v in verdicts}):
            by_sig[sig].append(node)
    storm_at = max(cfg.storm_min_nodes, math.ceil(cfg.storm_fraction * size))
    storm_nodes: set[str] = set()
    recent_by_sig: dict[str, set[str]] = defaultdict(set)
    for d in state.drains:  # a storm that arrives over several passes counts our recent drains too
        if now - float(d.get("time", 0)) < cfg.window_seconds and d.get("signature"):
            recent_by_sig[str(d["signature"])].add(str(d["node"]))
    for sig, nodes in sorted(by_sig.items()):
        if len(set(nodes) | recent_by_sig.get(sig, set())) >= storm_at:
            storm_nodes.update(nodes)
            decisions.append(
                Decision(
                    node=_fold(nodes),
                    action="alert",
                    code=sig.split(":")[0],
                    why=f"storm: {sig} on {len(nodes)} nodes at once (>= {storm_at}); suspect the checker or "
                    "the fabric, nothing drained",
                )
            )

    # 3. the brake budget for this pass
    recent = [d for d in state.drains if now - float(d.get("time", 0)) < cfg.window_seconds]
    # as the drain guardrails do: a fraction of the partition, but never less than one node
    budget = min(cfg.max_drains, max(1, math.floor(cfg.max_fraction * size))) - len(recent)
    held: list[str] = []

    for report in sorted(reports, key=lambda r: r.node):
        node = report.node
        sv = slurm_nodes.get(node)
        ours = sv is not None and sv.drain_flag and sv.reason.startswith(REASON_PREFIX)
        operator = sv is not None and sv.drain_flag and not ours
        verdict_json = [v.to_json() for v in report.problems]

        if report.status is Status.FAIL:
            state.clean_streak.pop(node, None)
            worst = failing[node][0]
            if node in storm_nodes:
                decisions.append(
                    Decision(node, "none", "part of a storm (see alert)", worst.code, "", verdict_json)
                )
            elif sv is None:
                decisions.append(Decision(node, "none", "not a Slurm node", worst.code, "", verdict_json))
            elif operator:
                decisions.append(
                    Decision(
                        node,
                        "none",
                        f"operator drain left alone ({sv.reason!r})",
                        worst.code,
                        "",
                        verdict_json,
                    )
                )
            elif ours:
                decisions.append(
                    Decision(node, "keep", "still failing; stays drained", worst.code, "", verdict_json)
                )
            elif sv.state in ("down", "future"):
                decisions.append(Decision(node, "none", f"node is {sv.state}", worst.code, "", verdict_json))
            elif budget <= 0:
                held.append(node)
                decisions.append(
                    Decision(
                        node,
                        "hold",
                        "brake: drain budget for the window is spent",
                        worst.code,
                        drain_reason(worst),
                        verdict_json,
                    )
                )
            else:
                budget -= 1
                decisions.append(
                    Decision(
                        node,
                        "drain",
                        "failing check",
                        worst.code,
                        drain_reason(worst),
                        verdict_json,
                        signature=signature(worst),
                    )
                )
            continue

        if report.status is Status.UNKNOWN:
            state.clean_streak.pop(node, None)
            decisions.append(
                Decision(node, "none", "unknown: never a reason to drain or resume", "", "", verdict_json)
            )
            continue

        # OK or WARN: a clean pass
        if ours and sv is not None:
            streak = state.clean_streak.get(node, 0) + 1
            state.clean_streak[node] = streak
            if streak >= cfg.resume_after_clean:
                decisions.append(
                    Decision(
                        node,
                        "resume",
                        f"clean {streak}/{cfg.resume_after_clean} passes",
                        "",
                        sv.reason,
                        verdict_json,
                    )
                )
            else:
                decisions.append(
                    Decision(
                        node,
                        "keep",
                        f"clean {streak}/{cfg.resume_after_clean} passes",
                        "",
                        sv.reason,
                        verdict_json,
                    )
                )
        else:
            state.clean_streak.pop(node, None)
            decisions.append(Decision(node, "none", report.status.value.lower(), "", "", verdict_json))

    if held:
        decisions.append(
            Decision(
                node=_fold(held),
                action="alert",
                code="brake",
                why=f"brake: {len(held)} failing node(s) not drained; limit {cfg.max_drains} nodes / "
                f"{cfg.max_fraction:.0%} of {size} per {cfg.window_seconds:.0f}s already reached",
            )
        )
    return decisions


class DecisionLog:
    """JSONL audit of every decision with its evidence (one line per decision per pass)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, decisions: list[Decision], now: float, mode: str) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as fh:
                for d in decisions:
                    fh.write(json.dumps({"time": now, "mode": mode, **d.to_json()}, sort_keys=True) + "\n")
        except OSError as exc:
            raise ConfigError(f"health audit log {self.path} is not writable: {exc.strerror}") from None


def act(
    decisions: list[Decision],
    slurm: SlurmActions | None,
    state: PolicyState,
    now: float,
    *,
    dry_run: bool,
    shadow: bool,
) -> list[Decision]:
    """Carry out drain/resume decisions; record our drains in ``state`` for the brake."""
    for d in decisions:
        if d.action not in ("drain", "resume"):
            d.result = "noop"
            continue
        if dry_run or shadow or slurm is None:
            d.result = "dry-run" if dry_run or slurm is None else "shadow"
            continue
        try:
            if d.action == "drain":
                slurm.drain([d.node], d.reason)
                state.drains.append(
                    {"node": d.node, "time": now, "reason": d.reason, "signature": d.signature}
                )
            else:
                slurm.resume([d.node])
                state.clean_streak.pop(d.node, None)
            d.result = "applied"
        except Refused as exc:  # the shared guardrails said no: nothing changed for this node
            d.result = "refused"
            d.why = f"{d.why}; {exc}"[:300]
        except Exception as exc:  # one node's failure must not stop the others; it is recorded
            d.result = "failed"
            d.why = f"{d.why}; {type(exc).__name__}: {exc}"[:300]
    # forget drains older than any window we could still be asked about
    state.drains = [x for x in state.drains if now - float(x.get("time", 0)) < 7 * 86400]
    return decisions
