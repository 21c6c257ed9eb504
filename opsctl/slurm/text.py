"""Parsers for Slurm's text output: `scontrol show node|job` (one-line `-o` and the multi-line
default), and `sinfo -N --all -o %all`. Pure functions: text in, `Node`/`Job` out.
"""

from __future__ import annotations

import re

from opsctl.model import Job, Node
from opsctl.nodeset import expand
from opsctl.slurm.base import SlurmError
from opsctl.slurm.states import gpu_summary, gpus_in_tres, gpus_per_node, normalize_state, slurm_node_state

# A key starts a token where it follows whitespace: `AllocNode:Sid=`, `CPUs/Task=`, `ReqB:S:C:T=`.
_KEY_RE = re.compile(r"(?:(?<=\s)|^)([A-Za-z_][A-Za-z0-9_/:.]*)=")
# A node's reason ends with `[user@time]`; matching that keeps reasons with spaces or '=' whole.
_NODE_REASON_RE = re.compile(r"(?:(?<=\s)|^)Reason=(.*?) \[([^\[\]@\s]+)@([0-9T:\-]+)\](?=\s|$)")


def records(text: str) -> list[str]:
    """Split scontrol output into one string per record (`-o` lines or indented blocks)."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            if out and out[-1]:
                out.append([])
            continue
        if line[0].isspace() and out and out[-1]:
            out[-1].append(line.strip())
        else:
            if out and not out[-1]:
                out[-1].append(line.strip())
            else:
                out.append([line.strip()])
    return [" ".join(parts) for parts in out if parts]


def tokenize(record: str) -> dict[str, str]:
    """`Key=value Key2=value with spaces` -> dict (first occurrence of a repeated key wins)."""
    fields: dict[str, str] = {}
    matches = list(_KEY_RE.finditer(record))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(record)
        key = match.group(1)
        if key not in fields:
            fields[key] = record[match.end():end].strip()
    return fields


def _null(value: str | None) -> str:
    return "" if value is None or value in {"(null)", "None", "N/A", "n/a"} else value


def parse_node_record(record: str) -> Node:
    reason, reason_user = "", ""
    match = _NODE_REASON_RE.search(record)
    if match:
        reason, reason_user = match.group(1).strip(), match.group(2)
        record = record[: match.start()] + record[match.end():]
    fields = tokenize(record)
    if not match:
        reason = _null(fields.get("Reason", ""))
    name = fields.get("NodeName", "")
    if "State" not in fields:
        raise SlurmError(f"node {name or '?'}: scontrol printed no State= field")
    base, flags = slurm_node_state(name, fields["State"])
    gpus_total, gpu_type = gpu_summary(fields.get("Gres"))
    if "GresUsed" in fields:
        gpus_alloc, _ = gpu_summary(fields["GresUsed"])
    else:
        gpus_alloc = gpus_in_tres(fields.get("AllocTRES"))
    partitions = [p for p in _null(fields.get("Partitions", "")).split(",") if p]
    return Node(
        name=name,
        state=base,
        flags=flags,
        reason=reason,
        reason_user=reason_user,
        gpus_total=gpus_total,
        gpus_alloc=gpus_alloc,
        gpu_type=gpu_type,
        partitions=partitions,
        cpus=_int(fields.get("CPUEfctv") or fields.get("CPUTot")),
    )


def _int(value: str | None) -> int:
    """A count field, 0 where absent or not a number (N/A)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0


def parse_nodes(text: str) -> list[Node]:
    """`scontrol [-d] [-o] show node` output -> nodes."""
    return [parse_node_record(r) for r in records(text) if r.startswith("NodeName=")]


def _user(value: str) -> str:
    """`root(0)` -> `root`."""
    return value.split("(", 1)[0]


def parse_exit_code(value: str) -> tuple[int | None, int | None]:
    """`ExitCode=1:0` -> (1, 0); `0:9` -> (0, 9)."""
    code, _, signal = value.partition(":")
    try:
        return int(code), int(signal or 0)
    except ValueError:
        return None, None


def parse_job_record(record: str) -> Job:
    fields = tokenize(record)
    exit_code, exit_signal = parse_exit_code(fields.get("ExitCode", ""))
    return Job(
        job_id=int(fields["JobId"]),
        name=_null(fields.get("JobName", "")),
        state=fields.get("JobState", "").upper(),
        nodes=expand(_null(fields.get("NodeList", ""))),
        exit_code=exit_code,
        exit_signal=exit_signal,
        restarts=int(fields.get("Restarts", "0") or 0),
        requeue=fields.get("Requeue", "0") == "1",
        reason=_null(fields.get("Reason", "")),
        partition=_null(fields.get("Partition", "")),
        user=_user(fields.get("UserId", "")),
        gpus_per_node=gpus_per_node(fields.get("TresPerNode")) or _job_gres_per_node(fields),
    )


def _job_gres_per_node(fields: dict[str, str]) -> int:
    total, _ = gpu_summary(fields.get("JOB_GRES"))
    nodes = max(1, int(fields.get("NumNodes", "1").split("-")[0] or 1))
    return total // nodes if total else 0


def parse_jobs(text: str) -> list[Job]:
    """`scontrol [-d] [-o] show job` output -> jobs."""
    return [parse_job_record(r) for r in records(text) if r.startswith("JobId=")]


def parse_sinfo_all(text: str) -> list[Node]:
    """`sinfo -N --all -o %all` (pipe-separated, header first; one row per node and partition).

    The header repeats some names (STATE: short then long; USER: name then name(uid)); the first
    occurrence is used. Rows for the same node are merged (partitions accumulate). %all carries no
    GRES usage, so gpus_alloc stays 0, and no job ids.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].split("|")]
    nodes: dict[str, Node] = {}
    for line in lines[1:]:
        values = [v.strip() for v in line.split("|")]
        row: dict[str, str] = {}
        for key, value in zip(header, values, strict=False):
            row.setdefault(key, value)
        name = row.get("NODELIST") or row.get("HOSTNAMES", "")
        if not name:
            continue
        base, flags = normalize_state(row.get("STATE", "unknown"))
        partition = row.get("PARTITION", "").rstrip("*")
        node = nodes.get(name)
        if node is None:
            gpus_total, gpu_type = gpu_summary(row.get("GRES"))
            reason = _null(row.get("REASON", ""))
            if reason == "none":
                reason = ""
            node = Node(
                name=name,
                state=base,
                flags=flags,
                reason=reason,
                reason_user=_user(_null(row.get("USER", ""))) if reason else "",
                gpus_total=gpus_total,
                gpu_type=gpu_type,
                cpus=_int(row.get("CPUS")),
            )
            nodes[name] = node
        if partition and partition not in node.partitions:
            node.partitions.append(partition)
    return list(nodes.values())
