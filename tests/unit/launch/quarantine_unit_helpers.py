"""An in-memory Slurm for quarantine unit tests: nodes to read, and nothing else allowed."""

from __future__ import annotations

from collections.abc import Sequence

from opsctl.errors import Unreachable
from opsctl.model import Job, Node, SubmitOptions
from opsctl.slurm.base import SlurmBackend, select_nodes


class NodesOnly(SlurmBackend):
    """Answers node reads (or raises Unreachable when `down`); any change to Slurm fails the test:
    quarantine commands must never drain, resume or submit."""

    name = "test"

    def __init__(self, nodes: Sequence[Node], down: bool = False) -> None:
        self._nodes = list(nodes)
        self.down = down
        self.reads = 0

    def nodes(self, names: Sequence[str] | None = None) -> list[Node]:
        self.reads += 1
        if self.down:
            raise Unreachable("slurmctld unreachable: Unable to contact slurm controller")
        return select_nodes(self._nodes, names)

    def drain(self, names: Sequence[str], reason: str) -> None:
        raise AssertionError("quarantine must not drain")

    def resume(self, names: Sequence[str]) -> None:
        raise AssertionError("quarantine must not resume")

    def submit(self, script: str, options: SubmitOptions | None = None) -> int:
        raise AssertionError("quarantine must not submit")

    def job(self, job_id: int) -> Job:
        raise AssertionError("quarantine reads no jobs")

    def jobs(self) -> list[Job]:
        raise AssertionError("quarantine reads no jobs")

    def cancel(self, job_id: int) -> None:
        raise AssertionError("quarantine must not cancel")

    def requeue(self, job_id: int) -> None:
        raise AssertionError("quarantine must not requeue")


def four_nodes(**drained: str) -> list[Node]:
    """gpu-001..004, idle; drained={"gpu_002": "opsctl:xid"} drains one with that reason."""
    nodes = []
    for i in range(1, 5):
        name = f"gpu-{i:03d}"
        node = Node(name, "idle", partitions=["gpu"], gpus_total=8, gpu_type="h200")
        reason = drained.get(name.replace("-", "_"))
        if reason:
            node.flags, node.reason, node.reason_user = {"DRAIN"}, reason, "root"
        nodes.append(node)
    return nodes
