"""Filters that turn the inventory and recorded hw_facts into slurm.conf node and partition lines.

Node lines come from the inventory (every host of the compute group, whether or not it is in
the play) and from the facts hw_facts recorded for each host on the controller, so rendering
with ``--limit`` gives the same slurm.conf as a full run. Runs on the Ansible controller, whose
Python is opsctl's environment (ClusterShell folds the host lists).
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ClusterShell.NodeSet import NodeSet


def slurm_hostlist(names: Iterable[str]) -> str:
    """Fold host names into a Slurm hostlist: gpu-001..gpu-064 -> gpu-[001-064]."""
    return str(NodeSet.fromlist(list(names)))


def _record(record_dir: str, host: str) -> dict[str, Any]:
    path = os.path.join(record_dir, f"{host}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise AnsibleFilterError(f"slurm_nodes: cannot read recorded facts {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _node_attrs(host: str, hv: Mapping[str, Any], hw: Mapping[str, Any], fraction: float) -> dict[str, Any]:
    declared = hv.get("slurm_node_declared") or {}
    cpu = hw.get("cpu") or {}
    mem = hw.get("memory") or {}
    if cpu and mem:
        sockets, cores, threads = cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"]
        real_memory = math.floor(int(mem["total_kib"]) / 1024 * fraction)
    elif declared:
        sockets, cores = declared["sockets"], declared["cores_per_socket"]
        threads, real_memory = declared["threads_per_core"], declared["real_memory_mib"]
    else:
        raise AnsibleFilterError(
            f"slurm_nodes: no hardware known for {host}: run hw_facts on it once, or set slurm_node_declared"
        )
    attrs: dict[str, Any] = {
        "CPUs": int(sockets) * int(cores) * int(threads),
        "Sockets": int(sockets),
        "CoresPerSocket": int(cores),
        "ThreadsPerCore": int(threads),
        "RealMemory": int(real_memory),
    }
    gpus = int((hv.get("hw_expected") or {}).get("gpu_count") or 0)
    gpu_type = hv.get("slurm_gpu_type") or ""
    if gpus:
        attrs["Gres"] = f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"
    features = hv.get("slurm_node_features") or []
    if features:
        attrs["Feature"] = ",".join(str(f) for f in features)
    attrs["State"] = "UNKNOWN"
    return attrs


def slurm_nodes(
    hosts: Iterable[str], hostvars: Mapping[str, Any], record_dir: str, fraction: float = 0.95
) -> list[dict[str, Any]]:
    """Nodes grouped by identical attributes, in host order.

    Each group: ``{nodelist, hosts, attrs, gpu_type, gpu_count}``.
    """
    groups: list[dict[str, Any]] = []
    for host in hosts:
        hv = hostvars[host]
        attrs = _node_attrs(host, hv, _record(record_dir, host), float(fraction))
        for group in groups:
            if group["attrs"] == attrs:
                group["hosts"].append(host)
                break
        else:
            gpu_count = int((hv.get("hw_expected") or {}).get("gpu_count") or 0)
            groups.append(
                {
                    "hosts": [host],
                    "attrs": attrs,
                    "gpu_type": hv.get("slurm_gpu_type") or "",
                    "gpu_count": gpu_count,
                }
            )
    for group in groups:
        group["nodelist"] = slurm_hostlist(group["hosts"])
    return groups


def slurm_value(value: Any) -> str:
    """A slurm.conf value: booleans as YES/NO, lists comma-joined."""
    if value is True:
        return "YES"
    if value is False:
        return "NO"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def slurmdbd_storage_pass(slurped: Mapping[str, Any] | None) -> str:
    """``StoragePass`` of a slurmdbd.conf read with ``slurp``; "" when absent or unreadable.

    The running database password is adopted from there when the controller has no copy, so a run
    from another controller home directory or checkout never invents a new one.
    """
    content = (slurped or {}).get("content") if isinstance(slurped, Mapping) else None
    if not content:
        return ""
    try:
        text = base64.b64decode(str(content)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ""
    found = ""
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "StoragePass":
            found = value.strip()
    return found


def mysql_quote(value: Any) -> str:
    """A value for a single-quoted MySQL/MariaDB string literal."""
    return str(value).replace("\\", "\\\\").replace("'", "\\'")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "slurm_hostlist": slurm_hostlist,
            "slurm_nodes": slurm_nodes,
            "slurm_value": slurm_value,
            "slurmdbd_storage_pass": slurmdbd_storage_pass,
            "mysql_quote": mysql_quote,
        }
