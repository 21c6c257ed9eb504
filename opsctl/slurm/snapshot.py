"""Slurm as one read showed it, shared by every step of a remediation pass.

A pass needs the cluster's nodes several times: the node set to check, the view policy decides on,
the partition's size, the drain guardrail's count before each drain and the node-state gauges after
the pass. Each of those used to list the nodes again, and every node listing of the CLI backend also
lists every job: a pass every few seconds asked slurmctld for the whole cluster five times. A
snapshot is read once (one node read, one job read) and handed to each step; the pass's own drains
and resumes are applied to it as they succeed, so the later steps see them without asking again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from opsctl.model import Node
from opsctl.slurm.base import SlurmBackend, select_nodes


@dataclass
class SlurmSnapshot:
    nodes: list[Node]  # every node, with the jobs that hold it
    read_at: float = 0.0  # time.time() of the read
    # what the reader's own change counter said just before the read (the remediation state counts
    # opsctl's drains and resumes): a reader that finds it moved since knows the snapshot is stale
    generation: int | None = None

    @classmethod
    def read(cls, backend: SlurmBackend, generation: int | None = None) -> SlurmSnapshot:
        """One node read (the backend lists the jobs with it)."""
        return cls(backend.nodes(None), time.time(), generation)

    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def select(self, names: Sequence[str] | None) -> list[Node]:
        """The named nodes in that order (all when None); UsageError naming unknown ones."""
        return select_nodes(self.nodes, names)

    def in_partition(self, partition: str | None) -> list[Node]:
        """The partition's nodes (every node when no partition is named)."""
        return in_partition(self.nodes, partition)

    def note_drain(self, names: Sequence[str], reason: str) -> None:
        """A drain this pass applied: the nodes show DRAIN with ``reason`` from now on."""
        for node in self._known(names):
            node.flags.add("DRAIN")
            node.reason = reason

    def note_resume(self, names: Sequence[str]) -> None:
        """A resume this pass applied: DRAIN and its reason are gone (Slurm clears DOWN too)."""
        for node in self._known(names):
            node.flags.discard("DRAIN")
            node.reason = ""
            node.reason_user = ""
            if node.state == "down":
                node.state = "idle"

    def _known(self, names: Sequence[str]) -> list[Node]:
        wanted = set(names)
        return [n for n in self.nodes if n.name in wanted]


def in_partition(nodes: Sequence[Node], partition: str | None) -> list[Node]:
    """The partition's nodes (every node when no partition is named)."""
    return [n for n in nodes if not partition or partition in n.partitions]


def partition_size(nodes: Sequence[Node], partition: str | None) -> int:
    """The partition's size as remediation counts it (the brake, the storm threshold, the guardrail's
    room): its nodes, or every node Slurm lists when it names none or has none."""
    return len(in_partition(nodes, partition)) or len(nodes)
