"""Slurm through pyslurm (the 25.11 API: `Nodes.load()`, `Node.modify()`, `Jobs.load()`,
`Job.load()`, `JobSubmitDescription.submit()`), used where pyslurm imports.

pyslurm links against one Slurm release (25.11.x for the PyPI wheels), so it works only where the
cluster runs that release; elsewhere `backend = "auto"` falls back to the CLI backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from opsctl.errors import Unreachable, UsageError
from opsctl.model import Job, Node, SubmitOptions
from opsctl.nodeset import expand, fold
from opsctl.slurm.base import SlurmBackend, SlurmError, attach_jobs, select_nodes
from opsctl.slurm.states import gpu_summary, gpus_counted_once, gpus_per_node, normalize_state, parse_gres


def import_pyslurm(slurm_conf: str | None = None) -> Any:
    """Import pyslurm (libslurm reads SLURM_CONF when it initializes, so set it first)."""
    if slurm_conf:
        os.environ["SLURM_CONF"] = slurm_conf
    import pyslurm  # type: ignore[import-not-found,unused-ignore]

    return pyslurm


def _values(collection: Any) -> Iterable[Any]:
    """pyslurm collections are dict-like (MultiClusterMap) or list-like depending on the release."""
    values = getattr(collection, "values", None)
    return list(values()) if callable(values) else list(collection)


def _gres_text(gres: Any) -> str:
    """pyslurm returns GRES as a dict ({"gpu:h200": 8} or {"gpu": {"type": ..., "count": ...}})."""
    if gres is None:
        return ""
    if isinstance(gres, str):
        return gres
    items = []
    for key, value in dict(gres).items():
        if isinstance(value, dict):
            gtype = value.get("type") or ""
            count = value.get("count", 0)
            items.append(f"{key}:{gtype}:{count}" if gtype else f"{key}:{count}")
        else:
            items.append(f"{key}:{value}")
    return ",".join(items)


class PyslurmBackend(SlurmBackend):
    name = "pyslurm"

    def __init__(self, slurm_conf: str | None = None, module: Any = None) -> None:
        self.pyslurm = module if module is not None else import_pyslurm(slurm_conf)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.pyslurm.RPCError as exc:
            message = str(exc)
            if "Unable to contact" in message or "connect" in message.lower():
                raise Unreachable(f"slurmctld unreachable: {message}") from None
            if "Invalid job id" in message or "does not exist" in message or "Invalid node name" in message:
                raise UsageError(f"{what}: {message}") from None
            raise SlurmError(f"{what}: {message}") from None

    def _node(self, node: Any) -> Node:
        base, flags = normalize_state(str(node.state or "UNKNOWN"))
        gpus_total, gpu_type = gpu_summary(_gres_text(node.configured_gres))
        # pyslurm 23.11+ reads allocated_gres from AllocTRES: {"gpu": 8, "gpu:h200": 8} is 8 GPUs
        gpus_alloc = gpus_counted_once(parse_gres(_gres_text(node.allocated_gres)))
        return Node(
            name=str(node.name),
            state=base,
            flags=flags,
            reason=str(node.reason or ""),
            reason_user=str(node.reason_user or ""),
            gpus_total=gpus_total,
            gpus_alloc=gpus_alloc,
            gpu_type=gpu_type,
            partitions=list(node.partitions or []),
            cpus=int(getattr(node, "effective_cpus", None) or getattr(node, "total_cpus", None) or 0),
        )

    def _job(self, job: Any) -> Job:
        return Job(
            job_id=int(job.id),
            name=str(job.name or ""),
            state=str(job.state or "").upper(),
            nodes=expand(str(job.allocated_nodes or "")),
            exit_code=job.exit_code,
            exit_signal=job.exit_code_signal,
            restarts=int(job.requeue_count or 0),
            requeue=bool(job.is_requeueable),
            reason=str(job.state_reason or "") if job.state_reason != "None" else "",
            partition=str(job.partition or ""),
            user=str(job.user_name or ""),
            gpus_per_node=gpus_per_node(_tres_per_node(job)),
        )

    def nodes(self, names: Sequence[str] | None = None) -> list[Node]:
        loaded = self._call("load nodes", self.pyslurm.Nodes.load)
        nodes = [self._node(n) for n in _values(loaded)]
        attach_jobs(nodes, self.jobs())
        return select_nodes(nodes, names)

    def jobs(self) -> list[Job]:
        loaded = self._call("load jobs", self.pyslurm.Jobs.load)
        return [self._job(j) for j in _values(loaded)]

    def job(self, job_id: int) -> Job:
        return self._job(self._call(f"job {job_id}", self.pyslurm.Job.load, int(job_id)))

    def drain(self, names: Sequence[str], reason: str) -> None:
        self._modify(names, self.pyslurm.Node(state="DRAIN", reason=reason), "drain")

    def mark_down(self, names: Sequence[str], reason: str) -> None:
        self._modify(names, self.pyslurm.Node(state="DOWN", reason=reason), "mark down")

    def resume(self, names: Sequence[str]) -> None:
        self._modify(names, self.pyslurm.Node(state="RESUME"), "resume")

    def _modify(self, names: Sequence[str], changes: Any, what: str) -> None:
        # One documented `Node(name).modify(changes)` RPC per node: the Nodes collection's
        # constructor splits strings on commas, which would break folded hostlists.
        for name in names:
            self._call(f"{what} {name}", self.pyslurm.Node(name).modify, changes)

    def submit(self, script: str, options: SubmitOptions | None = None) -> int:
        options = options or SubmitOptions()
        if options.extra_args:
            raise UsageError("extra sbatch arguments are not supported by the pyslurm backend")
        desc: dict[str, Any] = {"script": script}
        if options.job_name:
            desc["name"] = options.job_name
        if options.partition:
            desc["partitions"] = options.partition
        if options.nodes is not None:
            desc["nodes"] = options.nodes
        if options.nodelist:
            desc["required_nodes"] = fold(options.nodelist)
        if options.exclude:
            desc["excluded_nodes"] = fold(options.exclude)
        if options.requeue is not None:
            desc["is_requeueable"] = options.requeue
        if options.output:
            desc["standard_output"] = options.output
        if options.error:
            desc["standard_error"] = options.error
        desc["working_directory"] = options.chdir or os.getcwd()
        if options.gres:
            desc["gres_per_node"] = options.gres
        if options.ntasks_per_node is not None:
            desc["ntasks_per_node"] = options.ntasks_per_node
        if options.time_limit:
            desc["time_limit"] = options.time_limit
        desc["environment"] = {**os.environ, **options.environment}
        submission = self.pyslurm.JobSubmitDescription(**desc)
        return int(self._call("submit", submission.submit))

    def cancel(self, job_id: int) -> None:
        self._call(f"cancel {job_id}", self.pyslurm.Job(int(job_id)).cancel)

    def requeue(self, job_id: int) -> None:
        self._call(f"requeue {job_id}", self.pyslurm.Job(int(job_id)).requeue)


def _tres_per_node(job: Any) -> str:
    """pyslurm 25.11 exposes GPUs per node as `gres_per_node` (a dict or a string)."""
    value = getattr(job, "gres_per_node", None)
    return _gres_text(value) if value else ""
