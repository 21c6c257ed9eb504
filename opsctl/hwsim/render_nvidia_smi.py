"""``nvidia-smi -q`` text (driver 535 layout) and ``nvidia-smi nvlink -s`` from simulated state.

The layout (section order, names, indentation, the colon at column 42) follows the genuine 8x H100
report vendored in tests/fixtures/real-world/; the values come from the node's state.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opsctl.hwsim.state import Gpu, NodeHardware

_KEY_WIDTH = 42
_NA = "N/A"
# NVML clocks-event reason bits, in the order nvidia-smi prints them.
_CLOCK_EVENTS = (
    ("Idle", 0x1, 8),
    ("Applications Clocks Setting", 0x2, 8),
    ("SW Power Cap", 0x4, 8),
    ("HW Slowdown", 0x8, 8),
    ("HW Thermal Slowdown", 0x40, 12),
    ("HW Power Brake Slowdown", 0x80, 12),
    ("Sync Boost", 0x10, 8),
    ("SW Thermal Slowdown", 0x20, 8),
    ("Display Clock Setting", 0x100, 8),
)


def _kv(indent: int, key: str, value: object) -> str:
    return f"{' ' * indent + key:<{_KEY_WIDTH}}: {value}"


def _sec(indent: int, name: str) -> str:
    return " " * indent + name


def _yes(flag: bool) -> str:
    return "Yes" if flag else "No"


def _gpu_block(g: Gpu, minor: int, driver: str) -> list[str]:
    bus = int(g.bus_id[9:11], 16)
    active = [("Active" if g.clock_event_reasons & bit else "Not Active") for _, bit, _ in _CLOCK_EVENTS]
    # "HW Slowdown" is active when any hardware slowdown is.
    hw_any = g.clock_event_reasons & (0x8 | 0x40 | 0x80)
    active[3] = "Active" if hw_any else "Not Active"
    tlimit = 87 - g.temperature_c
    out = [
        f"GPU {g.bus_id}",
        _kv(4, "Product Name", "NVIDIA H200"),
        _kv(4, "Product Brand", "NVIDIA"),
        _kv(4, "Product Architecture", "Hopper"),
        _kv(4, "Display Mode", "Disabled"),
        _kv(4, "Display Active", "Disabled"),
        _kv(4, "Persistence Mode", "Enabled"),
        _kv(4, "Addressing Mode", "None"),
        _sec(4, "MIG Mode"),
        _kv(8, "Current", "Disabled"),
        _kv(8, "Pending", "Disabled"),
        _kv(4, "Accounting Mode", "Disabled"),
        _kv(4, "Accounting Mode Buffer Size", 4000),
        _sec(4, "Driver Model"),
        _kv(8, "Current", _NA),
        _kv(8, "Pending", _NA),
        _kv(4, "Serial Number", g.serial),
        _kv(4, "GPU UUID", g.uuid),
        _kv(4, "Minor Number", minor),
        _kv(4, "VBIOS Version", "96.00.99.00.01"),
        _kv(4, "MultiGPU Board", "No"),
        _kv(4, "Board ID", f"0x{bus:x}00"),
        _kv(4, "Board Part Number", "692-2G520-0280-000"),
        _kv(4, "GPU Part Number", "2335-885-A1"),
        _kv(4, "FRU Part Number", _NA),
        _kv(4, "Module ID", g.module_id),
        _sec(4, "Inforom Version"),
        _kv(8, "Image Version", "G520.0280.00.05"),
        _kv(8, "OEM Object", "2.1"),
        _kv(8, "ECC Object", "7.16"),
        _kv(8, "Power Management Object", _NA),
        _sec(4, "Inforom BBX Object Flush"),
        _kv(8, "Latest Timestamp", _NA),
        _kv(8, "Latest Duration", _NA),
        _sec(4, "GPU Operation Mode"),
        _kv(8, "Current", _NA),
        _kv(8, "Pending", _NA),
        _kv(4, "GSP Firmware Version", driver),
        _sec(4, "GPU Virtualization Mode"),
        _kv(8, "Virtualization Mode", "None"),
        _kv(8, "Host VGPU Mode", _NA),
        _sec(4, "GPU Reset Status"),
        _kv(8, "Reset Required", _yes(g.reset_required)),
        _kv(8, "Drain and Reset Recommended", _yes(g.drain_and_reset_recommended)),
        _sec(4, "IBMNPU"),
        _kv(8, "Relaxed Ordering Mode", _NA),
        _sec(4, "PCI"),
        _kv(8, "Bus", f"0x{bus:02X}"),
        _kv(8, "Device", "0x00"),
        _kv(8, "Domain", "0x0000"),
        _kv(8, "Device Id", "0x233510DE"),
        _kv(8, "Bus Id", g.bus_id),
        _kv(8, "Sub System Id", "0x18BE10DE"),
        _sec(8, "GPU Link Info"),
        _sec(12, "PCIe Generation"),
        _kv(16, "Max", g.pcie_gen_max),
        _kv(16, "Current", g.pcie_gen_current),
        _kv(16, "Device Current", g.pcie_gen_current),
        _kv(16, "Device Max", g.pcie_gen_max),
        _kv(16, "Host Max", _NA),
        _sec(12, "Link Width"),
        _kv(16, "Max", f"{g.pcie_width_max}x"),
        _kv(16, "Current", f"{g.pcie_width_current}x"),
        _sec(8, "Bridge Chip"),
        _kv(12, "Type", _NA),
        _kv(12, "Firmware", _NA),
        _kv(8, "Replays Since Reset", g.pcie_replays),
        _kv(8, "Replay Number Rollovers", 0),
        _kv(8, "Tx Throughput", "612 KB/s"),
        _kv(8, "Rx Throughput", "518 KB/s"),
        _kv(8, "Atomic Caps Inbound", _NA),
        _kv(8, "Atomic Caps Outbound", _NA),
        _kv(4, "Fan Speed", _NA),
        _kv(4, "Performance State", "P0"),
        _sec(4, "Clocks Event Reasons"),
    ]
    out += [_kv(indent, name, active[i]) for i, (name, _, indent) in enumerate(_CLOCK_EVENTS)]
    out += [
        _kv(4, "Sparse Operation Mode", "Disabled"),
        _sec(4, "FB Memory Usage"),
        _kv(8, "Total", f"{g.fb_total_mib} MiB"),
        _kv(8, "Reserved", f"{g.fb_reserved_mib} MiB"),
        _kv(8, "Used", f"{g.fb_used_mib} MiB"),
        _kv(8, "Free", f"{g.fb_free_mib} MiB"),
        _sec(4, "BAR1 Memory Usage"),
        _kv(8, "Total", "262144 MiB"),
        _kv(8, "Used", "1 MiB"),
        _kv(8, "Free", "262143 MiB"),
        _sec(4, "Conf Compute Protected Memory Usage"),
        _kv(8, "Total", "0 MiB"),
        _kv(8, "Used", "0 MiB"),
        _kv(8, "Free", "0 MiB"),
        _kv(4, "Compute Mode", "Default"),
        _sec(4, "Utilization"),
        _kv(8, "Gpu", f"{g.gpu_util_pct} %"),
        _kv(8, "Memory", f"{g.mem_util_pct} %"),
        _kv(8, "Encoder", "0 %"),
        _kv(8, "Decoder", "0 %"),
        _kv(8, "JPEG", "0 %"),
        _kv(8, "OFA", "0 %"),
        _sec(4, "Encoder Stats"),
        _kv(8, "Active Sessions", 0),
        _kv(8, "Average FPS", 0),
        _kv(8, "Average Latency", 0),
        _sec(4, "FBC Stats"),
        _kv(8, "Active Sessions", 0),
        _kv(8, "Average FPS", 0),
        _kv(8, "Average Latency", 0),
        _sec(4, "ECC Mode"),
        _kv(8, "Current", "Enabled"),
        _kv(8, "Pending", "Enabled"),
        _sec(4, "ECC Errors"),
        _sec(8, "Volatile"),
        _kv(12, "SRAM Correctable", 0),
        _kv(12, "SRAM Uncorrectable Parity", 0),
        _kv(12, "SRAM Uncorrectable SEC-DED", 0),
        _kv(12, "DRAM Correctable", g.ecc_sbe_volatile),
        _kv(12, "DRAM Uncorrectable", g.ecc_dbe_volatile),
        _sec(8, "Aggregate"),
        _kv(12, "SRAM Correctable", 0),
        _kv(12, "SRAM Uncorrectable Parity", 0),
        _kv(12, "SRAM Uncorrectable SEC-DED", 0),
        _kv(12, "DRAM Correctable", g.ecc_sbe_aggregate),
        _kv(12, "DRAM Uncorrectable", g.ecc_dbe_aggregate),
        _kv(12, "SRAM Threshold Exceeded", "No"),
        _sec(8, "Aggregate Uncorrectable SRAM Sources"),
        _kv(12, "SRAM L2", 0),
        _kv(12, "SRAM SM", 0),
        _kv(12, "SRAM Microcontroller", 0),
        _kv(12, "SRAM PCIE", 0),
        _kv(12, "SRAM Other", 0),
        # Hopper replaces page retirement with row remapping: nvidia-smi prints N/A here.
        _sec(4, "Retired Pages"),
        _kv(8, "Single Bit ECC", _NA),
        _kv(8, "Double Bit ECC", _NA),
        _kv(8, "Pending Page Blacklist", _NA),
        _sec(4, "Remapped Rows"),
        _kv(8, "Correctable Error", g.remapped_rows_correctable),
        _kv(8, "Uncorrectable Error", g.remapped_rows_uncorrectable),
        _kv(8, "Pending", _yes(g.remapped_rows_pending)),
        _kv(8, "Remapping Failure Occurred", _yes(g.remapped_rows_failure)),
        _sec(8, "Bank Remap Availability Histogram"),
        _kv(12, "Max", f"{2560 - (8 if g.remapped_rows_failure else 0)} bank(s)"),
        _kv(12, "High", "0 bank(s)"),
        _kv(12, "Partial", "0 bank(s)"),
        _kv(12, "Low", "0 bank(s)"),
        _kv(12, "None", f"{8 if g.remapped_rows_failure else 0} bank(s)"),
        _sec(4, "Temperature"),
        _kv(8, "GPU Current Temp", f"{g.temperature_c} C"),
        _kv(8, "GPU T.Limit Temp", f"{tlimit} C"),
        _kv(8, "GPU Shutdown T.Limit Temp", "-5 C"),
        _kv(8, "GPU Slowdown T.Limit Temp", "-2 C"),
        _kv(8, "GPU Max Operating T.Limit Temp", "0 C"),
        _kv(8, "GPU Target Temperature", _NA),
        _kv(8, "Memory Current Temp", f"{g.memory_temperature_c} C"),
        _kv(8, "Memory Max Operating T.Limit Temp", "0 C"),
        _sec(4, "GPU Power Readings"),
        _kv(8, "Power Draw", f"{g.power_draw_w:.2f} W"),
        _kv(8, "Current Power Limit", f"{g.power_limit_w:.2f} W"),
        _kv(8, "Requested Power Limit", f"{g.power_limit_w:.2f} W"),
        _kv(8, "Default Power Limit", "700.00 W"),
        _kv(8, "Min Power Limit", "200.00 W"),
        _kv(8, "Max Power Limit", "700.00 W"),
        _sec(4, "Module Power Readings"),
        _kv(8, "Power Draw", _NA),
        _kv(8, "Current Power Limit", _NA),
        _kv(8, "Requested Power Limit", _NA),
        _kv(8, "Default Power Limit", _NA),
        _kv(8, "Min Power Limit", _NA),
        _kv(8, "Max Power Limit", _NA),
        _sec(4, "Clocks"),
        _kv(8, "Graphics", f"{g.sm_clock_mhz} MHz"),
        _kv(8, "SM", f"{g.sm_clock_mhz} MHz"),
        _kv(8, "Memory", f"{g.memory_clock_mhz} MHz"),
        _kv(8, "Video", "765 MHz"),
        _sec(4, "Applications Clocks"),
        _kv(8, "Graphics", f"{g.max_sm_clock_mhz} MHz"),
        _kv(8, "Memory", f"{g.memory_clock_mhz} MHz"),
        _sec(4, "Default Applications Clocks"),
        _kv(8, "Graphics", f"{g.max_sm_clock_mhz} MHz"),
        _kv(8, "Memory", f"{g.memory_clock_mhz} MHz"),
        _sec(4, "Deferred Clocks"),
        _kv(8, "Memory", _NA),
        _sec(4, "Max Clocks"),
        _kv(8, "Graphics", f"{g.max_sm_clock_mhz} MHz"),
        _kv(8, "SM", f"{g.max_sm_clock_mhz} MHz"),
        _kv(8, "Memory", f"{g.memory_clock_mhz} MHz"),
        _kv(8, "Video", "1545 MHz"),
        _sec(4, "Max Customer Boost Clocks"),
        _kv(8, "Graphics", f"{g.max_sm_clock_mhz} MHz"),
        _sec(4, "Clock Policy"),
        _kv(8, "Auto Boost", _NA),
        _kv(8, "Auto Boost Default", _NA),
        _sec(4, "Voltage"),
        _kv(8, "Graphics", "670.000 mV"),
        _sec(4, "Fabric"),
        _kv(8, "State", "Completed"),
        _kv(8, "Status", "Success"),
        _kv(4, "Processes", "None"),
    ]
    return out


def render_nvidia_smi_q(state: NodeHardware, *, now: float | None = None) -> str:
    gpus = state.present_gpus
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(time.time() if now is None else now))
    lines = [
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", stamp),
        _kv(0, "Driver Version", state.driver_version),
        _kv(0, "CUDA Version", state.cuda_version),
        "",
        _kv(0, "Attached GPUs", len(gpus)),
    ]
    for n, g in enumerate(gpus):
        if n:
            lines.append("")
        # The minor number follows /dev/nvidiaN, which keeps its number when another GPU vanishes.
        lines += _gpu_block(g, g.index, state.driver_version)
    return "\n".join(lines) + "\n"


def render_nvlink_status(state: NodeHardware) -> str:
    """``nvidia-smi nvlink -s``: per GPU, each link's speed or ``<inactive>``."""
    lines: list[str] = []
    for n, g in enumerate(state.present_gpus):
        lines.append(f"GPU {n}: NVIDIA H200 (UUID: {g.uuid})")
        for link in g.nvlinks:
            speed = "26.562 GB/s" if link.up else "<inactive>"
            lines.append(f"\t Link {link.link}: {speed}")
    return "\n".join(lines) + "\n"


# --query-gpu fields: name -> (unit or "", value of a GPU). Units as nvidia-smi prints them.
QUERY_FIELDS: dict[str, tuple[str, Callable[[NodeHardware, Gpu], object]]] = {
    "index": ("", lambda s, g: g.index),
    "name": ("", lambda s, g: "NVIDIA H200"),
    "uuid": ("", lambda s, g: g.uuid),
    "serial": ("", lambda s, g: g.serial),
    "pci.bus_id": ("", lambda s, g: g.bus_id),
    "driver_version": ("", lambda s, g: s.driver_version),
    "count": ("", lambda s, g: len(s.present_gpus)),
    "memory.total": ("MiB", lambda s, g: g.fb_total_mib),
    "memory.used": ("MiB", lambda s, g: g.fb_used_mib),
    "memory.free": ("MiB", lambda s, g: g.fb_free_mib),
    "temperature.gpu": ("", lambda s, g: g.temperature_c),
    "power.draw": ("W", lambda s, g: f"{g.power_draw_w:.2f}"),
    "power.limit": ("W", lambda s, g: f"{g.power_limit_w:.2f}"),
    "utilization.gpu": ("%", lambda s, g: g.gpu_util_pct),
    "clocks.sm": ("MHz", lambda s, g: g.sm_clock_mhz),
    "pcie.link.gen.current": ("", lambda s, g: g.pcie_gen_current),
    "pcie.link.width.current": ("", lambda s, g: g.pcie_width_current),
    "ecc.errors.corrected.volatile.total": ("", lambda s, g: g.ecc_sbe_volatile),
    "ecc.errors.uncorrected.volatile.total": ("", lambda s, g: g.ecc_dbe_volatile),
}


class UnknownField(KeyError):
    """A --query-gpu field this simulator (or nvidia-smi) does not know."""


def render_query_gpu(state: NodeHardware, fields: list[str], fmt: str) -> str:
    """``nvidia-smi --query-gpu=F1,F2 --format=csv[,noheader][,nounits]``."""
    for f in fields:
        if f not in QUERY_FIELDS:
            raise UnknownField(f)
    opts = {o.strip() for o in fmt.split(",")}
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(f"{f} [{QUERY_FIELDS[f][0]}]" if QUERY_FIELDS[f][0] else f for f in fields))
    for g in state.present_gpus:
        cells = []
        for f in fields:
            unit, get = QUERY_FIELDS[f]
            value = str(get(state, g))
            cells.append(value if not unit or "nounits" in opts else f"{value} {unit}")
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def render_list(state: NodeHardware) -> str:
    """``nvidia-smi -L``."""
    return "".join(f"GPU {n}: NVIDIA H200 (UUID: {g.uuid})\n" for n, g in enumerate(state.present_gpus))
