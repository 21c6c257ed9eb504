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


def slurm_topology(
    hosts: Iterable[str], hostvars: Mapping[str, Any], unit_var: str, top: str
) -> list[dict[str, str]]:
    """topology.conf's switches (topology/tree): one leaf switch per fabric unit, the compute nodes
    whose ``unit_var`` names it, and ``top`` joining the units when there are several.

    A fabric unit is what the nodes' HCAs share below the spine: on a rail-optimised fat tree every
    rail of a scalable unit's nodes meets the same set of leaf switches, so Slurm sees the unit as
    one switch. Empty when no host names a unit; a host without one while others have one is refused
    (Slurm would never place it in a job beside the others).
    """
    units: dict[str, list[str]] = {}
    missing: list[str] = []
    for host in hosts:
        unit = (hostvars[host].get(unit_var) or "") if unit_var else ""
        if not unit:
            missing.append(host)
        else:
            units.setdefault(str(unit), []).append(host)
    if not units:
        return []
    if missing:
        raise AnsibleFilterError(
            f"slurm_topology: {slurm_hostlist(missing)} set no {unit_var} while "
            f"{sum(len(h) for h in units.values())} other compute nodes do; give every compute node "
            f"its fabric unit (or none of them)"
        )
    if top in units:
        raise AnsibleFilterError(f"slurm_topology: the top switch {top!r} is also a fabric unit's name")
    switches = [{"name": unit, "nodes": slurm_hostlist(members)} for unit, members in units.items()]
    if len(units) > 1:
        switches.append({"name": top, "switches": ",".join(units)})
    return switches


def _series(version: str) -> str:
    """A Debian package version's Slurm release series: 22.05.8-4+deb12u3 -> 22.05."""
    return ".".join(version.split(":")[-1].split(".")[:2])


def _upgrade_steps(releases: list[str], start: int, end: int, wide_from: int) -> list[str]:
    """The fewest series to pin in turn from releases[start] to releases[end]: a target accepts
    upgrades from two releases back, three from ``wide_from`` on (SchedMD's upgrade guide)."""
    steps, at = [], start
    while at < end:
        at = max(t for t in range(at + 1, end + 1) if t - at <= (3 if t >= wide_from else 2))
        steps.append(releases[at])
    return steps


def slurm_upgrade(
    installed: str, pinned: str, releases: list[str], wide_from: str = "24.11"
) -> dict[str, Any]:
    """What moving this host's installed Slurm (a package version; "" when not installed) to the
    pinned series takes: ``{from, to, upgrade}``, ``upgrade`` true when the series changes.

    Refused with the reason: a downgrade (slurmdbd converts its database forward only, slurmctld
    its state files), a series not in ``releases``, or a jump wider than SchedMD supports in one
    step, with the series to pin in turn.
    """
    if not installed:
        return {"from": "", "to": pinned, "upgrade": False}
    current = _series(installed)
    if current == pinned:
        return {"from": current, "to": pinned, "upgrade": False}
    for name in (current, pinned):
        if name not in releases:
            raise AnsibleFilterError(
                f"slurm_upgrade: Slurm {name} is not in slurm_release_series ({', '.join(releases)}); "
                f"add it in release order to plan an upgrade from {current} to {pinned}"
            )
    start, end = releases.index(current), releases.index(pinned)
    if end < start:
        raise AnsibleFilterError(
            f"slurm_upgrade: the pin {pinned} is older than the installed {current} ({installed}); "
            f"Slurm cannot be downgraded once its database and state are converted"
        )
    wide = releases.index(wide_from) if wide_from in releases else len(releases)
    steps = _upgrade_steps(releases, start, end, wide)
    if len(steps) > 1:
        raise AnsibleFilterError(
            f"slurm_upgrade: {current} -> {pinned} is wider than one Slurm upgrade: pin "
            f"{' then '.join(steps)} in turn, converging each"
        )
    return {"from": current, "to": pinned, "upgrade": True}


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
            "slurm_topology": slurm_topology,
            "slurm_upgrade": slurm_upgrade,
            "slurm_value": slurm_value,
            "slurmdbd_storage_pass": slurmdbd_storage_pass,
            "mysql_quote": mysql_quote,
        }
