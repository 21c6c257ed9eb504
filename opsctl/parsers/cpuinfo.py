"""Parser for Linux ``/proc/cpuinfo`` (x86_64 and aarch64).

x86 prints one block per logical CPU with ``physical id`` (socket), ``core id``, ``siblings``
(logical CPUs per socket) and ``cpu cores`` (cores per socket). aarch64 prints no socket or core
ids and no model name (``CPU part`` instead); there the topology falls back to one socket, one
thread per core, and ``sysfs`` topology (``/sys/devices/system/cpu``) is the better source.
Hypervisors and sandboxes may report a topology that differs from the host's; the summary says
what the guest sees, which is what Slurm on that guest must be told.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CpuInfo:
    logical_cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    model_name: str = ""
    vendor: str = ""
    flags: list[str] = field(default_factory=list)
    topology_from_ids: bool = False  # sockets/cores counted from physical/core ids

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


def _blocks(text: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    if current:
        blocks.append(current)
    return blocks


def parse_cpuinfo(text: str) -> CpuInfo:
    """Summarize the topology; ValueError when there is no ``processor`` entry."""
    procs = [b for b in _blocks(text) if "processor" in b and b["processor"].isdigit()]
    if not procs:
        raise ValueError("cpuinfo: no processor entries")
    logical = len(procs)
    first = procs[0]
    model = first.get("model name") or first.get("Processor") or first.get("CPU part", "")
    vendor = first.get("vendor_id") or first.get("CPU implementer", "")
    flags = (first.get("flags") or first.get("Features") or "").split()
    if all("physical id" in p and "core id" in p for p in procs):
        sockets = len({p["physical id"] for p in procs})
        cores = len({(p["physical id"], p["core id"]) for p in procs})
        cores_per_socket = max(1, cores // sockets)
        threads = max(1, logical // (sockets * cores_per_socket))
        return CpuInfo(logical, sockets, cores_per_socket, threads, model, vendor, flags, True)
    return CpuInfo(logical, 1, logical, 1, model, vendor, flags, False)
