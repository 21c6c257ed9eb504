"""Adapter for Slurm's OpenAPI v0.0.38 JSON (`sinfo --json`, `squeue --json` in Slurm 22.05).

Later plugins (v0.0.39+ and data_parser) renamed fields and turned scalars into objects; each
format version gets its own adapter module so a change never breaks the others.
"""

from __future__ import annotations

from typing import Any

from opsctl.model import Job, Node
from opsctl.nodeset import expand
from opsctl.slurm.base import SlurmError
from opsctl.slurm.states import gpu_summary, gpus_per_node, slurm_node_state

PLUGIN = "openapi/v0.0.38"


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def node_from_json(data: dict[str, Any]) -> Node:
    name = _str(data.get("name"))
    missing = [key for key in ("name", "state", "state_flags") if key not in data]
    if missing:
        raise SlurmError(f"node {name or '?'}: sinfo --json ({PLUGIN}) has no {', '.join(missing)}")
    base, flags = slurm_node_state(name, _str(data["state"]), list(data["state_flags"] or []))
    gpus_total, gpu_type = gpu_summary(data.get("gres"))
    gpus_alloc, _ = gpu_summary(data.get("gres_used"))
    return Node(
        name=name,
        state=base,
        flags=flags,
        reason=_str(data.get("reason")),
        reason_user=_str(data.get("reason_set_by_user")),
        gpus_total=gpus_total,
        gpus_alloc=gpus_alloc,
        gpu_type=gpu_type,
        partitions=list(data.get("partitions") or []),
        cpus=int(data.get("cpus") or 0),
    )


def parse_sinfo(doc: dict[str, Any]) -> list[Node]:
    return [node_from_json(n) for n in doc.get("nodes") or []]


def _exit_code(value: Any) -> tuple[int | None, int | None]:
    """v0.0.38 reports a wait(2) status: exit code in the high byte, signal in the low bits."""
    if not isinstance(value, int):
        return None, None
    return (value >> 8) & 0xFF, value & 0x7F


def job_from_json(data: dict[str, Any]) -> Job:
    exit_code, exit_signal = _exit_code(data.get("exit_code"))
    return Job(
        job_id=int(data["job_id"]),
        name=_str(data.get("name")),
        state=_str(data.get("job_state")).upper(),
        nodes=expand(_str(data.get("nodes"))),
        exit_code=exit_code,
        exit_signal=exit_signal,
        restarts=int(data.get("restart_cnt") or 0),
        requeue=bool(data.get("requeue")),
        reason=_str(data.get("state_reason")) if data.get("state_reason") != "None" else "",
        partition=_str(data.get("partition")),
        user=_str(data.get("user_name")),
        gpus_per_node=gpus_per_node(data.get("tres_per_node")),
    )


def parse_squeue(doc: dict[str, Any]) -> list[Job]:
    return [job_from_json(j) for j in doc.get("jobs") or []]
