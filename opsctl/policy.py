"""Remediation policy: turn node reports into decisions (decide), then carry them out (act).

``decide`` is pure: reports + the Slurm view of the nodes + persisted state in, decisions out.
Only ``act`` changes the world (drain/resume through the Slurm backend); in dry-run it changes
nothing, and in shadow mode it changes only the shadow state (so a shadow run shows the brake,
holds and resumes it would have made).

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
   Fatal: a node failing a fatal-class check (its fix is a GPU reset, a reboot or a replacement)
   that the brake or the guardrail stops is drained under its own allowance, ``fatal_max_drains``
   per window, counted apart; with that spent too it is latched in service (the latch remembers the
   fix it needs after the fault clears, and drains it once there is room) and paged every pass.
4. Latch: every drain records the action its fault needs (restart_app, reset_gpu, reboot, replace),
   the GPU (index and UUID) and the boot id. A node drained again for the same GPU (or, without a
   GPU, the same check) within ``escalate_window`` is escalated: held for a person, with an alert.
5. Resume: after ``resume_after_clean`` consecutive OK/WARN passes (UNKNOWN breaks the streak), each
   on evidence newer than the last counted one's (passes may come faster than Prometheus scrapes; N
   passes that re-read one scrape are one clean observation, not N), and only with proof of the
   fix: reboot-class needs a changed boot id, reset-class a reset (a changed boot id, or the
   driver's recovery action going from "reset" back to "none" on that GPU); replace-class and
   escalated drains are never resumed automatically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from opsctl.checks.catalogue import FAIL_ACTION
from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.errors import ConfigError, OpsctlError, Refused, Unreachable
from opsctl.evidence.model import BOOT_BTIME, BOOT_KERNEL
from opsctl.model import drain_owner, owned_reason

REASON_PREFIX = "opsctl:health:"
MAX_REASON = 120
# What a fault needs before the node may take work again, least to most; a drain latches the worst.
ACTIONS = ("none", "restart_app", "reset_gpu", "reboot", "replace")
_ACTION_RANK = {a: i for i, a in enumerate(ACTIONS)}
# recovery actions (NVML's, as evidence carries them) that ask for a reset or more
_RESET_ASKED = {"reset", "drain_and_reset"}
# Fault classes a node must not take work with: its GPU corrupts or loses jobs until reset, reboot or
# repair. A FAIL of "none" or "restart_app" (a port, a mount, slurmd, throttling) is the kind a
# checker or fabric event fakes on healthy nodes: only the brake and the guardrail apply to it.
FATAL_ACTIONS = frozenset({"reset_gpu", "reboot", "replace"})


def required_action(v: Verdict) -> str:
    action = v.evidence.get("action")
    if isinstance(action, str) and action in _ACTION_RANK:
        return action
    return FAIL_ACTION.get(v.code, "none")


# Missing evidence is no proof of a fault: like the classes a checker or fabric event fakes, it spends
# the brake only, never the fatal allowance, whatever its latch asks before a resume.
NOT_FATAL_CODES = frozenset({"evidence-lost"})


def is_fatal(v: Verdict) -> bool:
    return required_action(v) in FATAL_ACTIONS and v.code not in NOT_FATAL_CODES


class SlurmNodeView(Protocol):
    """What policy needs from a Slurm node (``opsctl.model.Node`` has all of it)."""

    name: str
    state: str
    reason: str

    @property
    def drain_flag(self) -> bool: ...


class SlurmActions(Protocol):
    """Drain and resume; a result word ("applied", "noop") or None (applied)."""

    def drain(self, names: Sequence[str], reason: str) -> str | None: ...

    def resume(self, names: Sequence[str]) -> str | None: ...


@dataclass
class PolicyConfig:
    max_drains: int = 2
    max_fraction: float = 0.10
    window_seconds: float = 3600.0
    storm_min_nodes: int = 3
    storm_fraction: float = 0.25
    resume_after_clean: int = 3
    shadow: bool = False
    escalate_window: float = 7 * 86400.0  # a second drain for the same GPU within this is held
    probe_hung_passes: int = 3  # a probe that times out this many passes in a row FAILs
    fatal_max_drains: int = 2  # fatal-class drains per window past the brake and the guardrail
    # seconds a node may lack a required family that other nodes have before it FAILs evidence-lost
    unknown_fail_after: float = 600.0
    # seconds a node may stay UNKNOWN before an alert says so (every node: the source, one page)
    unknown_alert_after: float = 300.0

    def validate(self) -> None:
        if self.max_drains < 0 or not 0 <= self.max_fraction <= 1:
            raise ConfigError("health: max_drains must be >= 0 and max_fraction in [0, 1]")
        if self.storm_min_nodes < 2 or not 0 < self.storm_fraction <= 1:
            raise ConfigError("health: storm_min_nodes must be >= 2 and storm_fraction in (0, 1]")
        if self.resume_after_clean < 1 or self.window_seconds <= 0:
            raise ConfigError("health: resume_after_clean must be >= 1 and window_seconds > 0")
        if self.escalate_window < 0 or self.probe_hung_passes < 1:
            raise ConfigError("health: escalate_window must be >= 0 and probe_hung_passes >= 1")
        if self.fatal_max_drains < 0:
            raise ConfigError("health: fatal_max_drains must be >= 0")
        if self.unknown_fail_after <= 0 or self.unknown_alert_after <= 0:
            raise ConfigError("health: unknown_fail_after and unknown_alert_after must be > 0")


@dataclass
class Decision:
    node: str  # a node name, or a folded node set for an alert
    action: str  # drain | resume | alert | hold | keep | none
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


@dataclass
class Latch:
    """What remediation recorded when it drained a node: what must happen before it may resume."""

    reason: str  # the Slurm reason it set; the drain is ours only while Slurm still shows it
    time: float
    code: str
    action: str  # one of ACTIONS
    gpu: int | None = None
    gpu_uuid: str = ""
    boot_id: str = ""  # the boot the fault happened in ("" when the source cannot tell)
    # what boot_id is: "kernel" (the kernel's boot_id) or "btime" ("boot-<boot time>"); "" in
    # latches written before kinds were recorded: told by the id's form (boot_kind)
    boot_kind: str = ""
    signature: str = ""
    reset_seen: bool = False  # the driver asked for a reset on that GPU while latched
    escalated: bool = False  # a repeat: held for a person
    # a fatal fault no allowance could drain: the node is still in service; drained when there is
    # room, spent by the fix's proof (or by someone else's drain)
    in_service: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Latch:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class PolicyState:
    """Persisted between passes: opsctl's drains (for the brake and escalation), the latches of
    health's own drains, clean streaks (with the observation time of each streak's last counted
    pass) and consecutive probe timeouts."""

    drains: list[dict[str, Any]] = field(default_factory=list)  # {"node","time","reason","owner",...}
    clean_streak: dict[str, int] = field(default_factory=dict)
    # node -> Evidence observation time of the streak's last counted pass; absent (a state file of
    # an earlier version, or a source without one): the next clean pass counts, as it used to
    clean_seen: dict[str, float] = field(default_factory=dict)
    latches: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> Latch as JSON
    probe_timeouts: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> probe -> passes
    # node -> DrainIntent as JSON: drains asked of Slurm and not yet confirmed (reconcile_intents)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    # drains and resumes remediation asked of Slurm, ever: a pass whose Slurm snapshot was read
    # before another process changed Slurm reads it again under the lock
    slurm_changes: int = 0
    # node -> required check -> when the node was first seen lacking its evidence while other nodes
    # had it (evidence-lost); node -> when it was first seen UNKNOWN (unknown alerts). Absent from
    # state files of earlier versions: the clocks start at the next pass.
    unknown_since: dict[str, dict[str, float]] = field(default_factory=dict)
    unknown_node_since: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PolicyState:
        p = Path(path)
        if not p.exists():
            return cls()
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            return cls(
                drains=list(data.get("drains", [])),
                clean_streak=dict(data.get("clean_streak", {})),
                clean_seen={str(k): float(v) for k, v in data.get("clean_seen", {}).items()},
                latches={str(k): dict(v) for k, v in data.get("latches", {}).items()},
                probe_timeouts={str(k): dict(v) for k, v in data.get("probe_timeouts", {}).items()},
                intents={str(k): dict(v) for k, v in data.get("intents", {}).items()},
                slurm_changes=int(data.get("slurm_changes", 0)),
                unknown_since={str(k): {str(f): float(t) for f, t in v.items()}
                               for k, v in data.get("unknown_since", {}).items()},
                unknown_node_since={str(k): float(v) for k, v in data.get("unknown_node_since", {}).items()},
            )
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise ConfigError(f"health state file {p} is unreadable: {exc}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a crash never leaves half a state file
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".health-state.")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(asdict(self), fh, indent=1, sort_keys=True)
        os.replace(tmp, p)

    def end_streak(self, node: str) -> None:
        self.clean_streak.pop(node, None)
        self.clean_seen.pop(node, None)

    def latch(self, node: str) -> Latch | None:
        data = self.latches.get(node)
        return Latch.from_json(data) if data is not None else None

    def set_latch(self, node: str, latch: Latch) -> None:
        self.latches[node] = asdict(latch)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the state file's lock (``<state>.lock``, flock) for a whole read-decide-act-write, so two
    remediation processes never both spend the same brake budget."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{p}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(f"health state file {p}: cannot take its lock: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


_REASON_CHARS = re.compile(r"[^A-Za-z0-9 .,_/@%+=-]")


def drain_reason(v: Verdict, suffix: str = "", owner: str = "health") -> str:
    """``opsctl:<owner>:<code>:<short evidence>``, in the plain characters the guardrails accept."""
    short = " ".join(_REASON_CHARS.sub(" ", v.short_evidence).split())
    return owned_reason(owner, f"{v.code}:{short}")[: MAX_REASON - len(suffix)] + suffix


def signature(v: Verdict) -> str:
    xid = v.evidence.get("xid")
    return f"{v.code}:xid{xid}" if xid is not None else v.code


def _fold(nodes: list[str]) -> str:
    try:
        from ClusterShell.NodeSet import NodeSet

        return str(NodeSet.fromlist(nodes))
    except Exception:  # pragma: no cover - ClusterShell is a dependency; fall back to a plain list
        return ",".join(nodes)


def _worst(verdicts: list[Verdict]) -> Verdict:
    """The failing verdict whose fix is heaviest (it decides what the drain latches)."""
    return max(verdicts, key=lambda v: _ACTION_RANK[required_action(v)])


def _repeat_key(node: str, code: str, gpu_uuid: str) -> str:
    return f"gpu:{gpu_uuid}" if gpu_uuid else f"node:{node}:{code}"


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
    _observe(latch, report)
    return latch


def _gpu_index(latch: Latch, report: NodeReport) -> int | None:
    if latch.gpu_uuid:
        for index, uuid in report.gpu_uuids.items():
            if uuid == latch.gpu_uuid:
                return index
    return latch.gpu


# A boot time ("btime" boot id) that moved less than this since the drain is the same boot: a clock
# step (chrony's first sync after a bad RTC, a clock set by hand) moves /proc/stat btime with the
# wall clock. A new boot starts after the drain, so its btime is later by at least the old boot's
# uptime at the drain. The kernel's boot_id has no such limit: it changes at a boot and never else.
BTIME_REBOOT_SECONDS = 60.0
_BTIME_ID = re.compile(r"^boot-(\d+)$")


def boot_kind(boot_id: str, kind: str = "") -> str:
    """What ``boot_id`` is: ``kind`` where recorded, else told by its form (latches written before
    kinds were recorded): ``boot-<seconds>`` is the Prometheus source's boot time, any other id the
    kernel's boot_id (what the SSH source reads). "" without an id."""
    if not boot_id:
        return ""
    return kind or (BOOT_BTIME if _BTIME_ID.match(boot_id) else BOOT_KERNEL)


def _btime(boot_id: str) -> float | None:
    m = _BTIME_ID.match(boot_id)
    return float(m.group(1)) if m else None


def boot_changed(latch: Latch, report: NodeReport) -> tuple[bool | None, str]:
    """Whether the node booted since the latch was recorded, and why: True (proven), False (the
    same boot) or None (cannot prove a reboot either way). Boot ids of different kinds are never
    compared: a latch on the kernel's boot_id needs the kernel's boot_id now; a latch on the boot
    time needs a boot time now (from either kind of report) and reads a move under
    ``BTIME_REBOOT_SECONDS`` as a clock step."""
    kind = boot_kind(latch.boot_id, latch.boot_kind)
    if not kind or not (report.boot_id or report.boot_time is not None):
        return None, "the source gives no boot id to prove one"
    if kind == BOOT_KERNEL:
        if boot_kind(report.boot_id, report.boot_kind) != BOOT_KERNEL:
            return None, (
                "cannot prove a reboot: the drain recorded the kernel's boot id, this pass has none "
                "(only the boot time, which a clock step moves)"
            )
        if report.boot_id != latch.boot_id:
            return True, "the kernel's boot id changed"
        return False, "boot id unchanged since the drain"
    then = _btime(latch.boot_id) if kind == BOOT_BTIME else None
    now = report.boot_time
    if now is None and boot_kind(report.boot_id, report.boot_kind) == BOOT_BTIME:
        now = _btime(report.boot_id)
    if then is None or now is None:
        return None, f"cannot prove a reboot: the drain recorded a {kind} boot id, this pass has no boot time"
    moved = now - then
    if moved >= BTIME_REBOOT_SECONDS:
        return True, f"the boot time moved {moved:.0f} s later"
    return False, (
        f"boot id unchanged since the drain (the boot time moved {moved:+.0f} s: under "
        f"{BTIME_REBOOT_SECONDS:.0f} s is a clock step, not a reboot)"
    )


def _observe(latch: Latch, report: NodeReport) -> None:
    """While latched: note when the driver asks for a reset (the proof needs a before and after),
    and raise the latch to reboot when the driver asks for one."""
    if boot_changed(latch, report)[0]:
        return  # another boot: what the driver says now is about the new boot
    index = _gpu_index(latch, report)
    wanted = report.recovery.get(index) if index is not None else None
    if wanted in _RESET_ASKED:
        latch.reset_seen = True
    if wanted == "reboot" and _ACTION_RANK[latch.action] < _ACTION_RANK["reboot"]:
        latch.action = "reboot"


def resume_proof(latch: Latch, report: NodeReport) -> tuple[bool, str]:
    """Whether the fix the latch asks for is proven by this (clean) report, and why (not)."""
    if latch.escalated:
        return False, "escalated (a repeat fault): resume by hand after the repair"
    rebooted, boot = boot_changed(latch, report)
    if latch.action == "replace":
        return False, "the fault needs a replacement: resume by hand after the repair"
    if latch.action == "reboot":
        if rebooted:
            return True, f"rebooted since the drain ({boot})"
        return False, f"waiting for a reboot: {boot}"
    if latch.action == "reset_gpu":
        if rebooted:
            return True, f"rebooted since the drain (the GPU was reset; {boot})"
        index = _gpu_index(latch, report)
        now = report.recovery.get(index) if index is not None else None
        if latch.reset_seen and now == "none":
            return True, f"GPU {index} was reset: the driver no longer asks for one"
        return False, "waiting for evidence of a GPU reset (or a reboot)"
    return True, "no proof needed"


def _cleared_by_reset(v: Verdict, latch: Latch, report: NodeReport) -> bool:
    """An XID of the latched GPU that a reset fixes, once the reset is proven: the exporter's count
    (and the kernel log) keep it in the window after the reset, but the driver, which asks for a
    reset again on a new such fault, no longer asks. Everything else must clear by itself."""
    return (
        latch.action == "reset_gpu"
        and v.code == "gpu-xid"
        and required_action(v) in ("restart_app", "reset_gpu")
        and v.gpu is not None
        and v.gpu == _gpu_index(latch, report)
        and resume_proof(latch, report)[0]
    )


def probe_verdicts(report: NodeReport, state: PolicyState, cfg: PolicyConfig, count: bool) -> None:
    """Probes that timed out ``probe_hung_passes`` passes in a row FAIL as ``probe-hung`` (a hung
    mount or nvidia-smi is UNKNOWN in one pass, a failure when it never answers). ``count`` adds
    this pass to the streaks; without it the streaks are only read."""
    seen = state.probe_timeouts.get(report.node, {})
    if count:
        if report.status is Status.UNKNOWN and not report.probe_timeouts and report.verdicts and all(
            v.code == "evidence" for v in report.verdicts
        ):
            return  # the node could not be read at all: no probe ran, the streaks stand
        seen = {p: seen.get(p, 0) + 1 for p in report.probe_timeouts}
        if seen:
            state.probe_timeouts[report.node] = seen
        else:
            state.probe_timeouts.pop(report.node, None)
    else:
        seen = {p: seen.get(p, 0) + 1 for p in report.probe_timeouts}
    hung = sorted(p for p, n in seen.items() if n >= cfg.probe_hung_passes)
    for probe in hung:
        report.verdicts.append(
            Verdict(
                "probe-hung",
                Status.FAIL,
                report.node,
                None,
                f"{probe} timed out {seen[probe]} passes in a row",
                # a driver call that never returns needs a reboot; a mount clears when its server does
                {"short": f"{probe} hung", "probe": probe, "passes": seen[probe],
                 "action": "reboot" if probe == "nvidia-smi" else "none"},
            )
        )
    if hung:
        report.status = Status.FAIL


def lacking_since(state: PolicyState, node: str, families: Sequence[str], now: float) -> dict[str, float]:
    """When ``node`` was first seen lacking each of ``families`` (the ones it lacks now; ``now`` for a
    new one): a family that came back in between restarted its clock."""
    had = state.unknown_since.get(node, {})
    return {f: float(had.get(f, now)) for f in sorted(families)}


def evidence_lost_verdict(node: str, since: Mapping[str, float], cfg: PolicyConfig,
                          now: float) -> Verdict | None:
    """FAIL ``evidence-lost`` for the families ``node`` has lacked for ``unknown_fail_after`` while
    other nodes had them; None while none has. It latches reboot: resumed once a new boot shows
    full, clean evidence (or by a person)."""
    lost = sorted(f for f, t in since.items() if now - t >= cfg.unknown_fail_after)
    if not lost:
        return None
    first = min(since[f] for f in lost)
    return Verdict(
        "evidence-lost", Status.FAIL, node, None,
        f"no evidence for {', '.join(lost)} for {now - first:.0f}s while other nodes have it "
        f"([health] unknown_fail_after {cfg.unknown_fail_after:.0f}s)",
        {"short": f"no {'+'.join(lost)} for {now - first:.0f}s", "families": lost, "since": first,
         "action": "reboot"},
    )


def track_node_unknown(reports: Sequence[NodeReport], state: PolicyState, now: float) -> None:
    """Start (or keep) the UNKNOWN clock of each UNKNOWN report's node; stop the others'."""
    for r in reports:
        if r.status is Status.UNKNOWN:
            state.unknown_node_since.setdefault(r.node, now)
        else:
            state.unknown_node_since.pop(r.node, None)


def unknown_alerts(reports: Sequence[NodeReport], state: PolicyState, cfg: PolicyConfig,
                   now: float) -> list[Decision]:
    """The alert for nodes UNKNOWN for ``unknown_alert_after`` or more: every node of the pass at
    once is the source lost (one page for the fleet, never a drain); some nodes, a ticket naming
    them."""
    ages = {r.node: now - state.unknown_node_since.get(r.node, now)
            for r in reports if r.status is Status.UNKNOWN}
    over = sorted(n for n, age in ages.items() if age >= cfg.unknown_alert_after)
    if not over:
        return []
    if len(ages) == len(reports):
        if len(over) < len(reports):
            return []  # the fleet went dark less than unknown_alert_after ago
        return [source_lost_alert(over, min(ages.values()), "no node has evidence")]
    return [Decision(_fold(over), "alert", code="unknown",
                     why=f"UNKNOWN for {max(ages[n] for n in over):.0f}s or less (over [health] "
                     f"unknown_alert_after {cfg.unknown_alert_after:.0f}s): not judged, not drained "
                     "unless a required family is lost (evidence-lost)")]


def source_lost_alert(nodes: Sequence[str], seconds: float, what: str) -> Decision:
    """The one page for a source lost on every node: nothing can be judged, nothing is drained."""
    return Decision(_fold(list(nodes)), "alert", code="source-lost",
                    why=f"evidence source lost on every node for {seconds:.0f}s ({what}): nothing is "
                    "judged or drained until it is back")


def judge_unknown(reports: Sequence[NodeReport], lacking: Mapping[str, Sequence[str]], state: PolicyState,
                  cfg: PolicyConfig, now: float, count: bool) -> list[Decision]:
    """End UNKNOWN. ``lacking``: node -> the required checks it has no evidence for while other nodes
    do (coverage's ``nodes_lacking_required``; a family no node has is not there, so a source lost
    everywhere never counts). Each lacked past ``unknown_fail_after`` adds FAIL ``evidence-lost`` to
    the node's report; returns the unknown alerts. ``count`` keeps the clocks in ``state``; without
    it they are only read (a plain pass shows what the service's clocks say) and no alert is made."""
    for r in reports:
        since = lacking_since(state, r.node, lacking.get(r.node, ()), now)
        if count:
            if since:
                state.unknown_since[r.node] = since
            else:
                state.unknown_since.pop(r.node, None)
        lost = evidence_lost_verdict(r.node, since, cfg, now)
        if lost is not None:
            r.verdicts.append(lost)
            r.status = Status.FAIL
    if not count:
        return []
    track_node_unknown(reports, state, now)
    return unknown_alerts(reports, state, cfg, now)


@dataclass(frozen=True)
class Storm:
    """One failure signature on too many nodes at once: its drains are held, and it is alerted."""

    signature: str
    nodes: tuple[str, ...]  # this pass's nodes failing it
    threshold: int

    def alert(self) -> Decision:
        return Decision(
            node=_fold(list(self.nodes)),
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
    _observe(latch, report)
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
    if pending is not None and _ACTION_RANK[pending.action] > _ACTION_RANK[new.action]:
        new.action = pending.action
    key = _repeat_key(node, new.code, new.gpu_uuid)
    repeat = cfg.escalate_window > 0 and any(
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
    if _ACTION_RANK[required_action(worst)] > _ACTION_RANK[latch.action]:
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
        nodes = _fold([d.node for d in held])
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
            node=_fold(fatal), action="alert", code="fatal-drain",
            why=f"fatal-class fault(s) drained past the brake or the drain guardrail under [health] "
            f"fatal_max_drains ({cfg.fatal_max_drains} per {cfg.window_seconds:.0f}s): the partition "
            "is below its usual floor until they are repaired"))
    escalated = [d.node for d in decisions if d.action == "drain" and d.latch.get("escalated")]
    if escalated:
        alerts.append(Decision(
            node=_fold(escalated), action="alert", code="escalated",
            why=f"repeat fault within {cfg.escalate_window:.0f}s on the same GPU (or check): drained "
            "and held; a person must repair and resume"))
    return alerts


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
    decisions: list[Decision] = []
    failing: dict[str, list[Verdict]] = {
        r.node: [v for v in r.verdicts if v.status is Status.FAIL] for r in reports if r.status is Status.FAIL
    }

    # 1. storms: the same signature on many nodes at once; each holds only its own signature
    storms = find_storms(failing, state.drains, cfg, now, size)
    decisions.extend(storm.alert() for storm in storms)
    stormed = {storm.signature for storm in storms}

    # 3. the brake budget for this pass (every opsctl drain in the window, health's and watch's), the
    # guardrail's room, and the fatal allowance beyond both
    budget = Budget.start(state.drains, cfg, size, now, guard_room)

    for report in sorted(reports, key=lambda r: r.node):
        node = report.node
        sv = slurm_nodes.get(node)
        verdict_json = [v.to_json() for v in report.problems]
        pending = take_pending(state, report, sv)  # a fatal fault latched in service
        latch = None if pending is not None else state.latch(node)
        held_by = drain_owner(sv.reason) if sv is not None and sv.drain_flag else ""
        ours = latch is not None and sv is not None and sv.drain_flag and sv.reason == latch.reason
        if latch is not None and not ours:
            # resumed or taken over by someone else: their call, the latch is spent
            state.latches.pop(node, None)
            state.end_streak(node)
            latch = None
        if ours and latch is not None:
            _observe(latch, report)
            state.set_latch(node, latch)
        foreign = sv is not None and sv.drain_flag and not ours
        status = report.status
        if status is Status.FAIL and ours and latch is not None and all(
            _cleared_by_reset(v, latch, report) for v in failing[node]
        ):
            status = Status.OK  # only the XIDs the proven reset dealt with are left in the window

        if status is Status.FAIL:
            state.end_streak(node)
            own = outside_storms(failing[node], stormed)  # judged as usual; the rest are the storms'
            worst = _worst(own or failing[node])
            if not own:
                decisions.append(Decision(node, "none", storm_held_why(failing[node]), worst.code, "",
                                          verdict_json))
            elif sv is None:
                decisions.append(Decision(node, "none", "not a Slurm node", worst.code, "", verdict_json))
            elif foreign:
                who = {
                    "manual": "opsctl drain by an operator",
                    "watch": "drained by opsctl watch (a run's failed node)",
                    "legacy": "opsctl drain of an earlier version",
                    "health": "health drain without a latch in this state file",
                }.get(held_by, "operator drain")
                decisions.append(
                    Decision(node, "none", f"{who} left alone ({sv.reason!r})", worst.code, "", verdict_json)
                )
            elif ours and latch is not None:
                if _ACTION_RANK[required_action(worst)] > _ACTION_RANK[latch.action]:
                    latch.action = required_action(worst)  # a heavier fault arrived while drained
                    state.set_latch(node, latch)
                decisions.append(
                    Decision(node, "keep", f"still failing; stays drained ({latch.action} latched)",
                             worst.code, "", verdict_json)
                )
            elif sv.state in ("down", "future"):
                decisions.append(Decision(node, "none", f"node is {sv.state}", worst.code, "", verdict_json))
            else:
                fatal = owner == "health" and (is_fatal(worst) or pending is not None)
                allowance = budget.take(fatal)
                if allowance:
                    decisions.append(_drain_decision(report, worst, verdict_json, state, cfg, now, owner,
                                                     allowance, pending))
                elif fatal:
                    latched = _in_service_latch(report, worst, now, owner, pending)
                    decisions.append(_fatal_hold(report, latched, verdict_json, budget, cfg))
                else:
                    decisions.append(Decision(node, "hold", budget.stopped_by(), worst.code,
                                              drain_reason(worst, owner=owner), verdict_json))
            continue

        if pending is not None and sv is not None:  # cleared (or unreadable), the fix not proven
            allowance = "" if sv.state in ("down", "future") else budget.take(True)
            if allowance:
                decisions.append(_pending_drain(report, pending, verdict_json, now, allowance))
            elif sv.state in ("down", "future"):
                decisions.append(Decision(node, "none", f"node is {sv.state}; {pending.action} latched", "",
                                          "", verdict_json))
            else:
                held_why = _fatal_hold(report, pending, verdict_json, budget, cfg)
                held_why.why += f" (fault cleared, {pending.action} not proven since)"
                decisions.append(held_why)
            continue

        if status is Status.UNKNOWN:
            state.end_streak(node)
            decisions.append(
                Decision(node, "none", "unknown: never a reason to drain or resume", "", "", verdict_json)
            )
            continue

        # OK or WARN: a clean pass
        if ours and latch is not None and sv is not None:
            seen, last = report.observed_at, state.clean_seen.get(node)
            if seen is not None and last is not None and seen <= last:
                streak = state.clean_streak.get(node, 0)
                decisions.append(
                    Decision(node, "keep", f"clean {streak}/{cfg.resume_after_clean} passes; no new "
                             "evidence since the last counted pass (the same scrape)", "", sv.reason,
                             verdict_json)
                )
                continue
            streak = state.clean_streak.get(node, 0) + 1
            state.clean_streak[node] = streak
            if seen is not None:
                state.clean_seen[node] = seen
            if streak < cfg.resume_after_clean:
                decisions.append(
                    Decision(node, "keep", f"clean {streak}/{cfg.resume_after_clean} passes", "",
                             sv.reason, verdict_json)
                )
                continue
            proven, why = resume_proof(latch, report)
            decisions.append(
                Decision(node, "resume" if proven else "keep",
                         f"clean {streak}/{cfg.resume_after_clean} passes; {why}", latch.code, sv.reason,
                         verdict_json)
            )
        else:
            state.end_streak(node)
            why = status.value.lower()
            if foreign:
                why += f"; drained by someone else, left alone ({sv.reason!r})" if sv is not None else ""
            decisions.append(Decision(node, "none", why, "", "", verdict_json))

    decisions.extend(pass_alerts(decisions, cfg, size))
    return decisions


def record_drain(state: PolicyState, node: str, now: float, reason: str, owner: str,
                 signature: str = "", key: str = "", allowance: str = "brake") -> None:
    """Count a drain against the brake, or the fatal allowance (and for escalation), whoever in
    opsctl made it."""
    state.drains.append(
        {"node": node, "time": now, "reason": reason, "owner": owner, "signature": signature, "key": key,
         "allowance": allowance}
    )


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


@dataclass
class DrainIntent:
    """A drain about to be asked of Slurm, saved in the state before ``scontrol`` runs. If the
    command times out after slurmctld applied it, or its audit line or the pass's state cannot be
    written, the next pass finds the node drained with this reason and latches it
    (``reconcile_intents``); a node that is not drained drops it, and policy decides afresh."""

    reason: str
    time: float
    owner: str
    code: str = ""
    signature: str = ""
    allowance: str = "brake"
    latch: dict[str, Any] = field(default_factory=dict)  # the latch the drain would set (health's)

    @classmethod
    def of(cls, d: Decision, now: float, owner: str) -> DrainIntent:
        return cls(d.reason, now, owner, d.code, d.signature, d.allowance or "brake", dict(d.latch))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DrainIntent:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def record_intent(state: PolicyState, d: Decision, now: float, owner: str,
                  persist: Callable[[PolicyState], None] | None) -> None:
    """Record (and with ``persist``, save) the drain before Slurm is asked for it."""
    state.intents[d.node] = asdict(DrainIntent.of(d, now, owner))
    if persist is not None:
        persist(state)


def _record_drain_done(state: PolicyState, node: str, latch: Latch, reason: str, owner: str,
                       signature: str, allowance: str) -> None:
    """A drain Slurm applied: counted against its allowance, latched (health's), streak ended."""
    key = _repeat_key(node, latch.code, latch.gpu_uuid)
    record_drain(state, node, latch.time, reason, owner, signature, key, allowance or "brake")
    if owner == "health":  # only health resumes, so only health latches
        state.set_latch(node, latch)
    state.end_streak(node)


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
    _record_drain_done(state, node, latch, intent.reason, intent.owner, intent.signature, intent.allowance)
    why = ("reconciled: Slurm shows the drain an earlier pass asked for and never saw confirmed "
           f"(timed out, or not recorded); latched {latch.action}" if intent.owner == "health" else
           "reconciled: Slurm shows the drain an earlier pass asked for and never saw confirmed")
    return Decision(node, "drain", why, intent.code, intent.reason, signature=intent.signature,
                    result="reconciled", latch=asdict(latch) if intent.owner == "health" else {},
                    allowance=intent.allowance)


def _ask_slurm(slurm: SlurmActions, d: Decision, state: PolicyState, now: float, owner: str,
               persist: Callable[[PolicyState], None] | None) -> str:
    """Drain (its intent recorded first) or resume; the result word."""
    if d.action == "resume":
        return slurm.resume([d.node]) or "applied"
    record_intent(state, d, now, owner, persist)
    result = _slurm_drain(slurm, d) or "applied"
    if result != "applied":
        state.intents.pop(d.node, None)  # nothing changed (already drained by someone)
    return result


def _record_done(d: Decision, state: PolicyState, now: float, owner: str, shadow: bool) -> None:
    """A drain or resume applied (or, in shadow mode, that would have been)."""
    if not shadow:
        state.slurm_changes += 1
    if d.action == "drain":
        state.intents.pop(d.node, None)
        latch = Latch.from_json(d.latch) if d.latch else Latch(d.reason, now, d.code, "none")
        latch.time = now
        _record_drain_done(state, d.node, latch, d.reason, owner, d.signature, d.allowance)
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
    """Carry out drain/resume decisions and record them in ``state`` (the shadow state in shadow
    mode, where nothing else changes); dry-run records nothing. Each drain's intent is recorded in
    ``state`` (and saved through ``persist``) before Slurm is asked: a drain whose command timed out
    is "unconfirmed" and the next pass reconciles it (``reconcile_intents``)."""
    for d in decisions:
        if d.action not in ("drain", "resume"):
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
