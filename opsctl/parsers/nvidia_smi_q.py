"""Parser for ``nvidia-smi -q`` TEXT output (not ``-q -x`` XML), drivers 470 to 570.

The report is an indented tree: ``Key : value`` lines and bare section headers, four spaces per
level, one ``GPU 00000000:53:00.0`` block per GPU. It is also the format of ``nvidia-smi -q -d
ECC,PAGE_RETIREMENT,...``, which prints only the chosen sections (fields that are absent stay
``None``). Section and key names moved between driver branches, and the parser accepts each
spelling seen in the wild:

- throttling: ``Clocks Throttle Reasons`` (up to 530) / ``Clocks Event Reasons`` (535+)
- ECC counts: ``SRAM/DRAM Correctable/Uncorrectable`` (A100/H100 drivers, with ``SRAM
  Uncorrectable Parity`` and ``SRAM Uncorrectable SEC-DED`` since 535) or ``Single Bit`` /
  ``Double Bit`` sub-sections with a ``Total`` line (older boards)

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Union

Tree = dict[str, Union[str, "Tree"]]
_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_NUM_RE = re.compile(r"^\s*(-?[\d.]+)")


@dataclass
class EccCounts:
    """Counts of one kind (volatile: since driver load; aggregate: lifetime)."""

    correctable: int | None = None  # SBE (single-bit), corrected by ECC
    uncorrectable: int | None = None  # DBE (double-bit) and parity: data was lost


@dataclass
class GpuQuery:
    bus_id: str
    index: int  # order in the report, which is nvidia-smi's GPU index
    product_name: str = ""
    uuid: str = ""
    serial: str = ""
    minor_number: int | None = None
    module_id: int | None = None
    vbios_version: str = ""
    persistence_mode: str = ""
    mig_mode: str = ""
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # the GPU's own maximum ("Device Max" where printed)
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    ecc_mode_current: str = ""
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    slowdown_temperature_c: float | None = None
    shutdown_temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    clock_event_reasons: dict[str, bool] = field(default_factory=dict)  # name -> active
    fabric_state: str = ""
    fabric_status: str = ""


@dataclass
class NvidiaSmiQuery:
    timestamp: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    attached_gpus: int | None = None
    gpus: list[GpuQuery] = field(default_factory=list)


def parse_tree(text: str) -> tuple[Tree, list[tuple[str, Tree]]]:
    """Split the report into top-level keys and one ``(bus id, tree)`` per GPU block.

    A ``Key : value`` line that has deeper-indented lines under it (``HW Slowdown`` and its
    ``HW Thermal Slowdown``; a process and its name) keeps its value and its children are put
    beside it in the same section. A repeated key keeps its first value.
    """
    top: Tree = {}
    gpus: list[tuple[str, Tree]] = []
    # stack of (indent of the section's children, section dict)
    stack: list[tuple[int, Tree]] = [(0, top)]
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        m = _GPU_HEADER_RE.match(line) if indent == 0 else None
        if m:
            gpu: Tree = {}
            gpus.append((m.group(1), gpu))
            stack = [(0, top), (1, gpu)]
            continue
        while len(stack) > 1 and indent < stack[-1][0]:
            stack.pop()
        section = stack[-1][1]
        if " : " in line or line.endswith(" :"):
            key, _, value = line.partition(" :")
            key = key.strip()
            if key not in section:
                section[key] = value.strip()
            # children of a key-value line land in the same section
            continue
        if line not in section or not isinstance(section[line], dict):
            section[line] = {}
        child = section[line]
        assert isinstance(child, dict)
        stack.append((indent + 1, child))
    return top, gpus


def _get(tree: Tree, *path: str) -> str | None:
    node: str | Tree = tree
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, str) else None


def _section(tree: Tree, *names: str) -> Tree:
    for name in names:
        node = tree.get(name)
        if isinstance(node, dict):
            return node
    return {}


def _num(value: str | None) -> float | None:
    if value is None:
        return None
    m = _NUM_RE.match(value)
    return float(m.group(1)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def _bool(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("yes", "true", "active"):
        return True
    if v in ("no", "false", "not active"):
        return False
    return None


def _ecc_counts(section: Tree) -> EccCounts:
    counts = EccCounts()
    corr = uncorr = 0
    seen_c = seen_u = False
    for key, value in section.items():
        if isinstance(value, dict):
            # older boards: "Single Bit" / "Double Bit" sub-sections with a Total line
            total = _int(_get(value, "Total"))
            if total is None:
                continue
            if key == "Single Bit":
                corr, seen_c = corr + total, True
            elif key == "Double Bit":
                uncorr, seen_u = uncorr + total, True
            continue
        n = _int(value)
        if n is None:
            continue
        if "Uncorrectable" in key:
            uncorr, seen_u = uncorr + n, True
        elif "Correctable" in key:
            corr, seen_c = corr + n, True
    counts.correctable = corr if seen_c else None
    counts.uncorrectable = uncorr if seen_u else None
    return counts


def _gpu(bus_id: str, index: int, t: Tree) -> GpuQuery:
    g = GpuQuery(bus_id=bus_id, index=index)
    g.product_name = _get(t, "Product Name") or ""
    g.uuid = _get(t, "GPU UUID") or ""
    g.serial = _get(t, "Serial Number") or ""
    g.minor_number = _int(_get(t, "Minor Number"))
    g.module_id = _int(_get(t, "Module ID"))
    g.vbios_version = _get(t, "VBIOS Version") or ""
    g.persistence_mode = _get(t, "Persistence Mode") or ""
    g.mig_mode = _get(t, "MIG Mode", "Current") or ""
    g.reset_required = _bool(_get(t, "GPU Reset Status", "Reset Required"))
    g.drain_and_reset_recommended = _bool(_get(t, "GPU Reset Status", "Drain and Reset Recommended"))
    link = _section(_section(t, "PCI"), "GPU Link Info")
    gen = _section(link, "PCIe Generation")
    g.pcie_gen_current = _int(_get(gen, "Device Current") or _get(gen, "Current"))
    g.pcie_gen_max = _int(_get(gen, "Device Max") or _get(gen, "Max"))
    width = _section(link, "Link Width")
    g.pcie_width_current = _int(_get(width, "Current"))
    g.pcie_width_max = _int(_get(width, "Max"))
    g.pcie_replays = _int(_get(t, "PCI", "Replays Since Reset"))
    g.ecc_mode_current = _get(t, "ECC Mode", "Current") or ""
    ecc = _section(t, "ECC Errors")
    g.ecc_volatile = _ecc_counts(_section(ecc, "Volatile"))
    g.ecc_aggregate = _ecc_counts(_section(ecc, "Aggregate"))
    retired = _section(t, "Retired Pages")
    g.retired_pages_sbe = _int(
        _get(retired, "Single Bit ECC") or _get(retired, "Single Bit ECC", "Count") or None
    )
    g.retired_pages_dbe = _int(_get(retired, "Double Bit ECC"))
    g.retired_pages_pending = _bool(_get(retired, "Pending Page Blacklist") or _get(retired, "Pending"))
    rows = _section(t, "Remapped Rows")
    g.remapped_rows_correctable = _int(_get(rows, "Correctable Error"))
    g.remapped_rows_uncorrectable = _int(_get(rows, "Uncorrectable Error"))
    g.remapped_rows_pending = _bool(_get(rows, "Pending"))
    g.remapped_rows_failure = _bool(_get(rows, "Remapping Failure Occurred"))
    temp = _section(t, "Temperature")
    g.temperature_c = _num(_get(temp, "GPU Current Temp"))
    g.memory_temperature_c = _num(_get(temp, "Memory Current Temp"))
    g.slowdown_temperature_c = _num(_get(temp, "GPU Slowdown Temp"))
    g.shutdown_temperature_c = _num(_get(temp, "GPU Shutdown Temp"))
    power = _section(t, "GPU Power Readings", "Power Readings")
    g.power_draw_w = _num(_get(power, "Power Draw") or _get(power, "Average Power Draw"))
    g.power_limit_w = _num(_get(power, "Current Power Limit") or _get(power, "Power Limit"))
    reasons = _section(t, "Clocks Event Reasons", "Clocks Throttle Reasons")
    for key, value in reasons.items():
        if isinstance(value, str) and _bool(value) is not None:
            g.clock_event_reasons[key] = bool(_bool(value))
    g.fabric_state = _get(t, "Fabric", "State") or ""
    g.fabric_status = _get(t, "Fabric", "Status") or ""
    return g


def parse_nvidia_smi_q(text: str) -> NvidiaSmiQuery:
    """Parse a full or ``-d``-filtered ``nvidia-smi -q`` text report."""
    top, blocks = parse_tree(text)
    report = NvidiaSmiQuery(
        timestamp=_get(top, "Timestamp") or "",
        driver_version=_get(top, "Driver Version") or "",
        cuda_version=_get(top, "CUDA Version") or "",
        attached_gpus=_int(_get(top, "Attached GPUs")),
    )
    report.gpus = [_gpu(bus, i, tree) for i, (bus, tree) in enumerate(blocks)]
    return report
