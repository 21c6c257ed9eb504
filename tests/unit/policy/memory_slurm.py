"""An in-memory Slurm for the policy tests that run a whole health pass: idle nodes gpu-001..N,
a drain sets the flag and the reason as slurmctld would, and nothing may resume."""

from __future__ import annotations

from opsctl.model import Node


class InMemorySlurm:
    def __init__(self, n: int = 6) -> None:
        self.all = {f"gpu-{i:03d}": Node(f"gpu-{i:03d}", "idle") for i in range(1, n + 1)}

    def nodes(self, names):
        return [n for n in self.all.values() if names is None or n.name in names]

    def drain(self, names, reason):
        for n in names:
            self.all[n].flags.add("DRAIN")
            self.all[n].reason = reason

    def resume(self, names):  # pragma: no cover - nothing resumes here
        raise AssertionError(names)
