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


def _ranges(numbers: Iterable[int]) -> str:
    """0,1,2,3,5 -> "0-3,5" (a Slurm range list)."""
    out: list[str] = []
    for n in sorted(set(numbers)):
        if out and out[-1].rsplit("-", 1)[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def _gpu_cores(hw: Mapping[str, Any], gpu_count: int) -> list[dict[str, str]]:
    """gres.conf's binding of GPUs to the cores of their NUMA node, from recorded facts.

    Slurm numbers cores logically, socket by socket (gres.conf(5), Cores): with the cores split
    evenly over the NUMA nodes, node n holds cores n*k .. n*k+k-1. Empty (no Cores=) when the facts
    lack a GPU's NUMA node or the CPU layout, or record another GPU count than the inventory expects
    (that node drains on its GPU count; a binding would only hide which GPU is gone).
    """
    gpus = hw.get("gpus") or []
    cpu = hw.get("cpu") or {}
    numa_nodes = int(hw.get("numa_nodes") or 0)
    if not gpus or len(gpus) != gpu_count or not cpu or numa_nodes < 1:
        return []
    cores = int(cpu["sockets"]) * int(cpu["cores_per_socket"])
    if any(not isinstance(g.get("numa_node"), int) for g in gpus) or cores % numa_nodes:
        return []
    per_node = cores // numa_nodes
    by_node: dict[int, list[int]] = {}
    for gpu in gpus:
        by_node.setdefault(int(gpu["numa_node"]), []).append(int(gpu["index"]))
    if max(by_node) >= numa_nodes:
        return []
    return [
        {"gpus": _ranges(by_node[n]), "cores": _ranges(range(n * per_node, (n + 1) * per_node))}
        for n in sorted(by_node)
    ]


def slurm_nodes(
    hosts: Iterable[str], hostvars: Mapping[str, Any], record_dir: str, fraction: float = 0.95
) -> list[dict[str, Any]]:
    """Nodes grouped by identical attributes and GPU-to-core binding, in host order.

    Each group: ``{nodelist, hosts, attrs, gpu_type, gpu_count, gpu_cores}``.
    """
    groups: list[dict[str, Any]] = []
    for host in hosts:
        hv = hostvars[host]
        hw = _record(record_dir, host)
        attrs = _node_attrs(host, hv, hw, float(fraction))
        gpu_count = int((hv.get("hw_expected") or {}).get("gpu_count") or 0)
        gpu_cores = _gpu_cores(hw, gpu_count)
        for group in groups:
            if group["attrs"] == attrs and group["gpu_cores"] == gpu_cores:
                group["hosts"].append(host)
                break
        else:
            groups.append(
                {
                    "hosts": [host],
                    "attrs": attrs,
                    "gpu_type": hv.get("slurm_gpu_type") or "",
                    "gpu_count": gpu_count,
                    "gpu_cores": gpu_cores,
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
