"""The one interface to Slurm that every command and area uses.

Backends: `opsctl.slurm.cli.CliBackend` (Slurm's commands: `--json` where the release has it, the
`scontrol -o` text otherwise) and `opsctl.slurm.pyslurm_backend.PyslurmBackend` (pyslurm 25.11,
used where it imports). Backends return normalized `Node`/`Job` objects and raise only
`opsctl.errors` exceptions: UsageError for unknown nodes/jobs, Unreachable when slurmctld cannot be
reached, OpsctlError for anything else Slurm rejected.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from opsctl.errors import OpsctlError
from opsctl.model import Job, Node, SubmitOptions


class SlurmError(OpsctlError):
    """Slurm answered but refused or failed the request (exit 3: state unknown)."""


class SlurmBackend(ABC):
    """Read and change the cluster: nodes, drains, batch jobs."""

    name: str = "abstract"

    @abstractmethod
    def nodes(self, names: Sequence[str] | None = None) -> list[Node]:
        """All nodes (or the named ones; unknown names raise UsageError), with their running jobs."""

    @abstractmethod
    def drain(self, names: Sequence[str], reason: str) -> None:
        """Set DRAIN with `reason` on the named nodes (running jobs keep running)."""

    @abstractmethod
    def resume(self, names: Sequence[str]) -> None:
        """Clear DRAIN (and DOWN) on the named nodes."""

    def mark_down(self, names: Sequence[str], reason: str) -> None:
        """Set DOWN with `reason` on drained nodes whose slurmd is silent: Slurm then ends their part
        of a job at once, instead of holding the job COMPLETING (and its other nodes) until
        SlurmdTimeout. DRAIN stays set, so the node does not return to service when its slurmd
        registers again (ReturnToService=2 would return a node that was only DOWN)."""
        raise SlurmError(f"the {self.name} backend cannot set nodes down; use the cli backend")

    def reboot(self, names: Sequence[str], reason: str) -> None:
        """Ask Slurm to reboot the named nodes once idle (RebootProgram) and resume them once their
        slurmd registers from the new boot, `reason` set meanwhile."""
        raise SlurmError(f"the {self.name} backend cannot reboot nodes; use the cli backend")

    @abstractmethod
    def submit(self, script: str, options: SubmitOptions | None = None) -> int:
        """Submit a batch script (its text); return the job id."""

    @abstractmethod
    def job(self, job_id: int) -> Job:
        """One job (also finished ones while slurmctld remembers them); unknown ids raise UsageError."""

    @abstractmethod
    def jobs(self) -> list[Job]:
        """Every job slurmctld knows about."""

    @abstractmethod
    def cancel(self, job_id: int) -> None:
        """Cancel a job."""

    @abstractmethod
    def requeue(self, job_id: int) -> None:
        """Requeue a running (requeueable) batch job."""

    def node(self, name: str) -> Node:
        found = self.nodes([name])
        return found[0]


def attach_jobs(nodes: list[Node], jobs: Sequence[Job]) -> None:
    """Fill `Node.jobs` with the ids of jobs that currently hold each node."""
    by_name = {n.name: n for n in nodes}
    for job in jobs:
        if job.state not in {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED"}:
            continue
        for node_name in job.nodes:
            node = by_name.get(node_name)
            if node is not None and job.job_id not in node.jobs:
                node.jobs.append(job.job_id)
    for node in nodes:
        node.jobs.sort()


def select_nodes(nodes: list[Node], names: Sequence[str] | None) -> list[Node]:
    """The named nodes in the requested order; UsageError naming the unknown ones."""
    if names is None:
        return sorted(nodes, key=lambda n: n.name)
    from opsctl.errors import UsageError
    from opsctl.nodeset import fold

    by_name = {n.name: n for n in nodes}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise UsageError(f"unknown node(s): {fold(unknown)}")
    return [by_name[name] for name in names]
