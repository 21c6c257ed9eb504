"""What remediation keeps between passes, and the lock that guards it.

``PolicyState`` is the state file (opsctl's drains for the brake and escalation, the latches of
health's own drains, clean streaks, probe streaks, the evidence clocks and the drain intents not yet
confirmed); ``locked`` holds its lock for a whole load-decide-act-save. Nothing here asks Slurm
anything: ``opsctl.remediation.policy`` decides on this state, ``opsctl.remediation.actions`` acts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from opsctl.errors import ConfigError


def repeat_key(node: str, code: str, gpu_uuid: str) -> str:
    """What a repeat fault is told by (escalation): the GPU's UUID, else the node and check."""
    return f"gpu:{gpu_uuid}" if gpu_uuid else f"node:{node}:{code}"


@dataclass
class Latch:
    """What remediation recorded when it drained a node: what must happen before it may resume."""

    reason: str  # the Slurm reason it set; the drain is ours only while Slurm still shows it
    time: float
    code: str
    action: str  # one of opsctl.checks.fixes.ACTIONS
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
    # when remediation asked Slurm to reboot the node ([health] auto_reboot; 0: not asked): asked once
    # per latch; the boot id, not Slurm's resume, proves the reboot
    reboot_asked: float = 0.0
    # when a pass first saw Slurm resume it after that reboot: only evidence observed later can say
    # the boot id did not change (older samples are of the boot before)
    back_seen: float = 0.0

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
    # node -> failure signature -> when a pass first saw it (in a row): a non-fatal FAIL drains only
    # once it is [health] confirm_after old. Absent from earlier state files: first seen next pass.
    failing_since: dict[str, dict[str, float]] = field(default_factory=dict)

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
                failing_since={str(k): {str(g): float(t) for g, t in v.items()}
                               for k, v in data.get("failing_since", {}).items()},
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


def read_state(path: str) -> PolicyState:
    try:
        return PolicyState.load(path)
    except ConfigError:
        return PolicyState()  # a plain health pass never fails on remediation's state


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


def record_drain(state: PolicyState, node: str, now: float, reason: str, owner: str,
                 signature: str = "", key: str = "", allowance: str = "brake") -> None:
    """Count a drain against the brake, or the fatal allowance (and for escalation), whoever in
    opsctl made it."""
    state.drains.append(
        {"node": node, "time": now, "reason": reason, "owner": owner, "signature": signature, "key": key,
         "allowance": allowance}
    )


def record_drain_done(state: PolicyState, node: str, latch: Latch, reason: str, owner: str,
                       signature: str, allowance: str) -> None:
    """A drain Slurm applied: counted against its allowance, latched (health's), streak ended."""
    key = repeat_key(node, latch.code, latch.gpu_uuid)
    record_drain(state, node, latch.time, reason, owner, signature, key, allowance or "brake")
    if owner == "health":  # only health resumes, so only health latches
        state.set_latch(node, latch)
    state.end_streak(node)


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
    def from_json(cls, data: dict[str, Any]) -> DrainIntent:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
