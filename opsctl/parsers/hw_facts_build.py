"""The ``hw`` fact of a GPU node from raw tool outputs, and its comparison with what the node must
have: shared by the ``hw_facts`` Ansible module (``library/hw_facts.py``) and ``opsctl preflight``.

Pure functions only: no command is run and no file is read here, so the module can feed them from a
live host and opsctl from outputs fetched over SSH (or recorded samples).

This is the one module of this package that uses its siblings. It imports them relatively
(``from .cpuinfo import ...``), which resolves to ``opsctl.parsers.cpuinfo`` when opsctl imports it
and to ``ansible.module_utils.cpuinfo`` when Ansible ships it to a host as a module_util (Ansible
follows relative imports between module_utils and ships the siblings too).

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from typing import Any

from .cpuinfo import parse_cpuinfo
from .ib_sysfs import parse_ib_sysfs
from .lsblk import mounts_of, nvme_disks, parse_lsblk_json
from .meminfo import parse_meminfo
from .nvidia_smi_q import parse_nvidia_smi_q, parse_tree
from .nvme import parse_nvme_list_json

LSBLK_ARGS = ["-J", "-b", "-p", "-o", "NAME,TYPE,SIZE,ROTA,SERIAL,MODEL,TRAN,MOUNTPOINT,FSTYPE"]
SYSTEM_MOUNTS = {"/", "/boot", "/boot/efi", "[SWAP]"}
_MIB_RE = re.compile(r"^\s*(\d+)\s*MiB")


def pci_sysfs_address(bus_id: str) -> str:
    """nvidia-smi's ``00000000:53:00.0`` as sysfs names it: ``0000:53:00.0``."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def gpu_facts(text: str, numa_by_bus: dict[str, int | None]) -> dict[str, Any]:
    report = parse_nvidia_smi_q(text)
    _, trees = parse_tree(text)
    memory = {}
    for bus_id, tree in trees:
        fb = tree.get("FB Memory Usage")
        total = fb.get("Total") if isinstance(fb, dict) else None
        m = _MIB_RE.match(total) if isinstance(total, str) else None
        memory[bus_id] = int(m.group(1)) if m else None
    gpus = [
        {
            "index": g.index,
            "bus_id": g.bus_id,
            "model": g.product_name,
            "memory_mib": memory.get(g.bus_id),
            "uuid": g.uuid,
            "serial": g.serial,
            "numa_node": numa_by_bus.get(g.bus_id),
            "fabric_state": g.fabric_state,
        }
        for g in report.gpus
    ]
    return {
        "driver_version": report.driver_version,
        "cuda_version": report.cuda_version,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "gpu_models": sorted({g["model"] for g in gpus}),
    }


def ib_facts(files: dict[str, str], numa_by_hca: dict[str, int | None]) -> list[dict[str, Any]]:
    out = []
    for dev in parse_ib_sysfs(files):
        for port in dev.ports:
            out.append(
                {
                    "name": dev.name,
                    "port": port.number,
                    "state": port.state,
                    "physical_state": port.phys_state,
                    "rate_gbps": port.rate_gbps,
                    "link_layer": port.link_layer,
                    "numa_node": numa_by_hca.get(dev.name),
                    "fw_ver": dev.fw_ver,
                    "board_id": dev.board_id,
                }
            )
    return out


def nvme_facts(lsblk_text: str, nvme_text: str | None) -> list[dict[str, Any]]:
    devices = parse_lsblk_json(lsblk_text)
    by_path = {}
    if nvme_text:
        by_path = {ns.path: ns for ns in parse_nvme_list_json(nvme_text)}
    out = []
    for disk in nvme_disks(devices):
        mounts = mounts_of(disk)
        ns = by_path.get(disk.path)
        out.append(
            {
                "path": disk.path,
                "model": disk.model or (ns.model if ns else ""),
                "serial": disk.serial or (ns.serial if ns else ""),
                "firmware": ns.firmware if ns else "",
                "size_bytes": disk.size_bytes,
                "mounts": mounts,
                # a drive holding /, /boot or swap (through partitions, LVM or md) is not scratch
                "system": bool(SYSTEM_MOUNTS.intersection(mounts)),
            }
        )
    return out


def build_hw_facts(
    *,
    nvidia_smi_q: str | None,
    gpu_numa: dict[str, int | None],
    ib_files: dict[str, str] | None,
    ib_numa: dict[str, int | None],
    lsblk_json: str | None,
    nvme_json: str | None,
    cpuinfo: str,
    meminfo: str,
    nvswitch_count: int,
    numa_nodes: int,
    errors: list[str] | None = None,
) -> dict[str, Any]:
    """The ``hw`` fact from raw inputs (pure: no I/O), so it can be fed recorded samples."""
    errors = list(errors or [])
    hw: dict[str, Any] = {
        "gpus": [],
        "gpu_count": 0,
        "gpu_models": [],
        "driver_version": "",
        "cuda_version": "",
    }
    if nvidia_smi_q is not None:
        hw.update(gpu_facts(nvidia_smi_q, gpu_numa))
    fabric = {g["fabric_state"] for g in hw["gpus"] if g.get("fabric_state")}
    hw["nvswitch_count"] = nvswitch_count
    hw["nvlink_fabric"] = nvswitch_count > 0 or "Completed" in fabric
    hw["ib_hcas"] = ib_facts(ib_files, ib_numa) if ib_files is not None else []
    hw["nvme"] = []
    if lsblk_json is not None:
        try:
            hw["nvme"] = nvme_facts(lsblk_json, nvme_json)
        except ValueError as exc:
            errors.append(str(exc))
    cpu = parse_cpuinfo(cpuinfo)
    hw["cpu"] = {
        "logical_cpus": cpu.logical_cpus,
        "sockets": cpu.sockets,
        "cores_per_socket": cpu.cores_per_socket,
        "threads_per_core": cpu.threads_per_core,
        "model_name": cpu.model_name,
    }
    mem = parse_meminfo(meminfo)
    hw["memory"] = {"total_kib": mem.total_kib, "total_mib": mem.total_mib}
    hw["numa_nodes"] = numa_nodes
    hw["collection_errors"] = errors
    return hw


def expectation_problems(hw: dict[str, Any], expected: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, sentence)`` per difference between the discovered hardware and what the node must
    have. Keys: ``gpu_count``, ``gpu_model``, ``gpu_memory``, ``ib_hcas``, ``ib_state``, ``ib_rate``,
    ``nvme``; each names the expectation (``expected``'s key) it comes from."""
    out: list[tuple[str, str]] = []
    want = expected.get("gpu_count")
    if want is not None and hw["gpu_count"] != int(want):
        out.append(("gpu_count", f"gpu_count: found {hw['gpu_count']} GPUs, expected {want}"))
    sub = expected.get("gpu_model_substring")
    if sub:
        wrong = sorted({g["model"] for g in hw["gpus"] if sub not in g["model"]})
        if wrong:
            models = ", ".join(wrong)
            out.append(("gpu_model", f"gpu_model: found {models}, expected models containing {sub!r}"))
    min_mib = expected.get("gpu_memory_mib_min")
    if min_mib is not None:
        small = [str(g["index"]) for g in hw["gpus"] if (g["memory_mib"] or 0) < int(min_mib)]
        if small:
            out.append(("gpu_memory", f"gpu_memory: GPUs {', '.join(small)} have less than {min_mib} MiB"))
    hcas = expected.get("ib_hcas")
    if hcas:
        ib = [p for p in hw["ib_hcas"] if p["link_layer"] in ("InfiniBand", "")]
        found = {p["name"] for p in ib}
        missing = [h for h in hcas if h not in found]
        if missing:
            out.append(("ib_hcas", f"ib_hcas: missing {', '.join(missing)}"))
        down = sorted(f"{p['name']}/{p['port']}" for p in ib if p["name"] in hcas and p["state"] != "ACTIVE")
        if down:
            out.append(("ib_state", f"ib_state: not ACTIVE: {', '.join(down)}"))
        rate = expected.get("ib_rate_gbps")
        if rate is not None:
            slow = sorted(
                f"{p['name']}/{p['port']} ({p['rate_gbps']} Gb/s)"
                for p in ib
                if p["name"] in hcas and p["state"] == "ACTIVE" and (p["rate_gbps"] or 0) < float(rate)
            )
            if slow:
                out.append(("ib_rate", f"ib_rate: below {rate} Gb/s: {', '.join(slow)}"))
    nvme_min = expected.get("nvme_data_min")
    if nvme_min is not None:
        data = [d for d in hw["nvme"] if not d["system"]]
        if len(data) < int(nvme_min):
            out.append(("nvme", f"nvme: found {len(data)} data NVMe drives, expected at least {nvme_min}"))
    return out


def check_expected(hw: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """One sentence per difference between the discovered hardware and what the node must have."""
    return [sentence for _key, sentence in expectation_problems(hw, expected)]
