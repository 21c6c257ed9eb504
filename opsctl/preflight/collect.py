"""The hw_facts discovery, run over SSH: the same tools and files the Ansible module reads on the
node (``nvidia-smi -q``, the InfiniBand sysfs tree, ``lsblk -J``, ``nvme list -o json`` when
nvme-cli is installed, ``/proc/cpuinfo``, ``/proc/meminfo``, NUMA and NVSwitch entries), turned
into the module's ``hw`` fact by the shared :func:`build_hw_facts`.

Only fixed commands are sent (a configured sysfs root is quoted); node names never reach a shell.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from opsctl.evidence.ssh import CommandResult, ib_root_pick
from opsctl.parsers.hw_facts_build import LSBLK_ARGS, build_hw_facts, pci_sysfs_address
from opsctl.parsers.ib_sysfs import DEFAULT_ROOT, grep_argv, parse_grep_output
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q

_NVME_ABSENT = "@opsctl-no-nvme-cli"
_PCI_NUMA_RE = re.compile(r"^/sys/bus/pci/devices/([^/]+)/numa_node:(-?\d+)\s*$")


def _ib_command(root: str | None) -> str:
    # Globs stay outside quotes so the shell expands them under the picked root.
    globs = [g for g in grep_argv("/ROOT") if "counters" not in g]  # identity and link, no counters
    globs.append("/ROOT/*/device/numa_node")
    expanded = " ".join('"$r"' + g[len("/ROOT") :] for g in globs)
    return f'{ib_root_pick(root)}; echo "@root=$r"; grep -sH . {expanded}; true'


def commands(ib_sysfs_root: str | None = None) -> dict[str, str]:
    return {
        "nvidia_smi": "nvidia-smi -q",
        "pci_numa": "grep -sH . /sys/bus/pci/devices/*/numa_node; true",
        "ib": _ib_command(ib_sysfs_root),
        "lsblk": shlex.join(["lsblk", *LSBLK_ARGS]),
        "nvme": f"if command -v nvme >/dev/null 2>&1; then nvme list -o json; else echo {_NVME_ABSENT}; fi",
        "cpuinfo": "cat /proc/cpuinfo",
        "meminfo": "cat /proc/meminfo",
        "numa_nodes": "ls -1 /sys/devices/system/node",
        "dev": "ls -1 /dev",
    }


@dataclass
class NodeFacts:
    node: str
    hw: dict[str, Any] | None  # the hw_facts module's ``hw`` fact; None when it could not be built
    error: str = ""  # why hw is None


def _fail_text(cmd: str, r: CommandResult) -> str:
    return f"{cmd}: exit {r.rc}: {(r.stderr or r.stdout).strip()[:200]}"


def facts_from_outputs(node: str, out: dict[str, CommandResult]) -> NodeFacts:
    """Pure: the outputs of :func:`commands` on one node -> its ``hw`` fact."""
    errors: list[str] = []
    cpuinfo, meminfo = out.get("cpuinfo"), out.get("meminfo")
    if cpuinfo is None or meminfo is None or not cpuinfo.ok or not meminfo.ok:
        return NodeFacts(node, None, "cannot read /proc/cpuinfo and /proc/meminfo")

    smi_text: str | None = None
    smi = out.get("nvidia_smi")
    if smi is not None and smi.ok:
        smi_text = smi.stdout
    elif smi is not None:
        # "No devices were found", a GPU off the bus, no driver: no GPU is usable
        errors.append("nvidia-smi: not found" if smi.rc == 127 else _fail_text("nvidia-smi -q", smi))

    gpu_numa: dict[str, int | None] = {}
    pci = out.get("pci_numa")
    if smi_text is not None:
        by_addr: dict[str, int] = {}
        for line in (pci.stdout if pci is not None and pci.ok else "").splitlines():
            m = _PCI_NUMA_RE.match(line)
            if m:
                by_addr[m.group(1).lower()] = int(m.group(2))
        for g in parse_nvidia_smi_q(smi_text).gpus:
            gpu_numa[g.bus_id] = by_addr.get(pci_sysfs_address(g.bus_id))

    ib_files: dict[str, str] = {}
    ib_numa: dict[str, int | None] = {}
    ib = out.get("ib")
    root = DEFAULT_ROOT
    if ib is not None and ib.ok:
        root_line, _, rest = ib.stdout.partition("\n")
        root = root_line.removeprefix("@root=").strip() or DEFAULT_ROOT
        for rel, value in parse_grep_output(rest, root).items():
            name, _, leaf = rel.partition("/")
            if leaf == "device/numa_node":
                try:
                    ib_numa[name] = int(value.strip())
                except ValueError:
                    ib_numa[name] = None
            else:
                ib_files[rel] = value
    if not ib_files:
        errors.append(f"{root}: no InfiniBand devices")

    lsblk = out.get("lsblk")
    lsblk_text = lsblk.stdout if lsblk is not None and lsblk.ok else None
    if lsblk is not None and not lsblk.ok:
        errors.append(_fail_text("lsblk", lsblk))
    nvme = out.get("nvme")
    nvme_text = None
    if nvme is not None and nvme.ok and nvme.stdout.strip() != _NVME_ABSENT:
        nvme_text = nvme.stdout
    elif nvme is not None and not nvme.ok:
        errors.append(_fail_text("nvme list -o json", nvme))

    numa = out.get("numa_nodes")
    numa_nodes = len(re.findall(r"^node\d+$", numa.stdout, re.M)) if numa is not None and numa.ok else 0
    dev = out.get("dev")
    nvswitch = len(re.findall(r"^nvidia-nvswitch\d+$", dev.stdout, re.M)) if dev is not None and dev.ok else 0
    try:
        hw = build_hw_facts(
            nvidia_smi_q=smi_text,
            gpu_numa=gpu_numa,
            ib_files=ib_files,
            ib_numa=ib_numa,
            lsblk_json=lsblk_text,
            nvme_json=nvme_text,
            cpuinfo=cpuinfo.stdout,
            meminfo=meminfo.stdout,
            nvswitch_count=nvswitch,
            numa_nodes=numa_nodes,
            errors=errors,
        )
    except ValueError as exc:
        return NodeFacts(node, None, f"hardware facts: {exc}"[:200])
    return NodeFacts(node, hw)
