"""The data that flows between Slurm access, guardrails and the commands.

Other areas (health, launch, watch) import `Node` and `Job`; keep the field names stable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# The prefix every opsctl drain reason carries; it is how opsctl tells its drains from an operator's.
OPSCTL_REASON_PREFIX = "opsctl:"
# Who made an opsctl drain, as the second word of its reason: ``opsctl:<owner>:<detail>``.
# health: automatic remediation (the only drains health may resume, and only with proof of the fix);
# watch: a node that failed under a run (resumed by a person); manual: `opsctl drain` by an operator.
DRAIN_OWNERS = ("health", "watch", "manual")


def drain_owner(reason: str) -> str:
    """The owner of a drain from its Slurm reason: health, watch, manual, legacy (an opsctl reason
    from before owners were recorded; resumed only by a person) or "" (not opsctl's)."""
    if not reason.startswith(OPSCTL_REASON_PREFIX):
        return ""
    word = reason[len(OPSCTL_REASON_PREFIX):].split(":", 1)[0]
    return word if word in DRAIN_OWNERS else "legacy"


def owned_reason(owner: str, detail: str) -> str:
    """``opsctl:<owner>:<detail>``; the reason every opsctl drain sets."""
    if owner not in DRAIN_OWNERS:
        raise ValueError(f"unknown drain owner {owner!r}")
    return f"{OPSCTL_REASON_PREFIX}{owner}:{detail}"


@dataclass
class Node:
    """One Slurm node as any backend reports it, normalized.

    `state` is the base state in lowercase (idle, allocated, mixed, down, future, unknown, error);
    `flags` carries the modifiers in uppercase (DRAIN, NOT_RESPONDING, COMPLETING, FAIL, ...).
    """

    name: str
    state: str
    flags: set[str] = field(default_factory=set)
    reason: str = ""
    reason_user: str = ""
    gpus_total: int = 0
    gpus_alloc: int = 0
    gpu_type: str = ""
    jobs: list[int] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    # CPUs a job can use on the node (effective: less any CoreSpecCount), 0 where not reported
    cpus: int = 0

    @property
    def drain_flag(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def drained_by_opsctl(self) -> bool:
        return self.drain_flag and self.reason.startswith(OPSCTL_REASON_PREFIX)

    @property
    def drain_owner(self) -> str:
        """health | watch | manual | legacy for opsctl's drains, "" for anyone else's (or none)."""
        return drain_owner(self.reason) if self.drain_flag else ""

    @property
    def out_of_service(self) -> bool:
        """Drained (by anyone) or down: the node takes no new work."""
        return self.drain_flag or self.state in {"down", "future"} or "FAIL" in self.flags

    @property
    def display_state(self) -> str:
        """The state as sinfo would summarize it (drained, draining, idle, mixed, down*...)."""
        if self.drain_flag:
            busy = self.state in {"allocated", "mixed"} or "COMPLETING" in self.flags
            base = "draining" if busy else "drained"
        else:
            base = self.state
        if "NOT_RESPONDING" in self.flags:
            base += "*"
        return base

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = sorted(self.flags)
        data["display_state"] = self.display_state
        return data


@dataclass
class Job:
    """One Slurm job, normalized across backends."""

    job_id: int
    name: str = ""
    state: str = ""  # uppercase, as Slurm spells it: PENDING, RUNNING, COMPLETED, FAILED, ...
    nodes: list[str] = field(default_factory=list)
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0  # how many times Slurm requeued/restarted it
    requeue: bool = False  # whether the job may be requeued
    reason: str = ""
    partition: str = ""
    user: str = ""
    gpus_per_node: int = 0

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FINISHED_JOB_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    }
)


@dataclass
class SubmitOptions:
    """Options of a batch submission; names follow sbatch's long options."""

    job_name: str | None = None
    partition: str | None = None
    nodes: int | None = None  # --nodes
    nodelist: list[str] = field(default_factory=list)  # --nodelist
    exclude: list[str] = field(default_factory=list)  # --exclude
    requeue: bool | None = None  # --requeue / --no-requeue; None leaves Slurm's default
    output: str | None = None  # --output
    error: str | None = None  # --error
    chdir: str | None = None  # --chdir
    gres: str | None = None  # --gres, e.g. "gpu:h200:8"
    ntasks_per_node: int | None = None
    time_limit: str | None = None  # --time
    environment: dict[str, str] = field(default_factory=dict)  # exported on top of the caller's
    extra_args: list[str] = field(default_factory=list)  # further sbatch options, CLI backend only
