"""Faults that change a node's simulated hardware the way the real failure would show in its tools.

A fault spec is ``NAME[=VALUE][,KEY=VALUE...]``, for example ``xid=79``, ``xid=79,gpu=3``,
``ecc_dbe,gpu=2``, ``gpu_missing=3``, ``ib_down=mlx5_2``, ``clock_step=30`` (the wall clock
stepped: the boot time moves, the boot and its boot_id stay). Two specs are repairs rather than
faults: ``reboot`` (a new boot, with a new kernel boot_id: volatile state clears, damage stays) and
``gpu_reset[,gpu=K]`` (``nvidia-smi -r``). ``heal`` returns the node to its healthy, seeded self
(as a repaired, rebooted node would be: a new boot, counters and the kernel log start again).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from opsctl.errors import UsageError
from opsctl.hwsim.state import (
    RECOVERY_DRAIN_AND_RESET,
    RECOVERY_DRAIN_P2P,
    RECOVERY_GPU_RESET,
    RECOVERY_NODE_REBOOT,
    RECOVERY_NONE,
    Gpu,
    NodeHardware,
    XidEvent,
    make_node,
    new_boot_id,
)


class FaultError(UsageError):
    """An unknown fault name or a bad fault argument; the state was not changed."""


@dataclass(frozen=True)
class FaultSpec:
    name: str
    value: str | None
    params: dict[str, str]


# What the kernel prints after "Xid (PCI:...): N, pid=..., name=..., " for the XIDs we model.
XID_MESSAGES: dict[int, str] = {
    13: "Graphics Exception: ESR 0x514730=0x1f000000 0x514734=0x0 0x514728=0x4c1eb72 0x51472c=0x0",
    31: "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_12340000. "
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000008",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
    "partition 6, subpartition 0.",
    63: "Row remapping event: Row remapping pending. Reset the GPU to remap the affected rows.",
    64: "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate detected",
    94: "Ch 00000008",
    95: "Uncontained: SM ECC. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20801813 0x4c).",
}
# XIDs the driver reports outside any process context (pid='<unknown>').
_NO_PROCESS_XIDS = {48, 63, 64, 74, 79, 92, 95}
# XIDs after which nvidia-smi reports that the GPU needs a reset.
_RESET_XIDS = {48, 64, 74, 79, 95, 119}
# The recovery action the driver asks for after these XIDs (NVML nvmlDeviceGetGpuRecoveryAction),
# following the immediate action of NVIDIA's XID catalog: a GPU off the bus (79) cannot be reached
# by a reset and needs the node rebooted (RESTART_BM); an uncorrectable ECC error with its row
# remap pending (48), a failed remap (64), an NVLink fatal error (74), an uncontained error (95) and
# a GSP timeout (119) need the GPU reset (RESET_GPU).
_XID_RECOVERY = {xid: RECOVERY_GPU_RESET for xid in _RESET_XIDS} | {79: RECOVERY_NODE_REBOOT}
# When several are pending the strongest wins: a reboot resets every GPU, a drain-and-reset
# includes the reset.
_RECOVERY_RANK = {
    RECOVERY_NONE: 0,
    RECOVERY_DRAIN_P2P: 1,
    RECOVERY_GPU_RESET: 2,
    RECOVERY_DRAIN_AND_RESET: 3,
    RECOVERY_NODE_REBOOT: 4,
}


def parse_spec(spec: str) -> FaultSpec:
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise FaultError("empty fault spec")
    head, _, value = parts[0].partition("=")
    params: dict[str, str] = {}
    for p in parts[1:]:
        key, eq, val = p.partition("=")
        if not eq or not key or not val:
            raise FaultError(f"bad fault parameter {p!r} in {spec!r} (want KEY=VALUE)")
        params[key] = val
    return FaultSpec(head, value or None, params)


def _int(spec: FaultSpec, text: str | None, what: str, default: int | None = None) -> int:
    if text is None:
        if default is None:
            raise FaultError(f"fault {spec.name!r} needs {what}")
        return default
    try:
        return int(text)
    except ValueError:
        raise FaultError(f"fault {spec.name!r}: {what} must be an integer, not {text!r}") from None


def _gpu(state: NodeHardware, spec: FaultSpec, text: str | None) -> Gpu:
    index = _int(spec, text, "a GPU index", default=0)
    try:
        return state.gpu(index)
    except KeyError:
        raise FaultError(f"fault {spec.name!r}: no GPU {index} (0-{len(state.gpus) - 1})") from None


def add_xid(state: NodeHardware, gpu: Gpu, xid: int, *, now: float | None = None) -> None:
    message = XID_MESSAGES.get(xid, "Xid event").replace("{gpu}", str(gpu.index))
    no_process = xid in _NO_PROCESS_XIDS
    state.xids.append(
        XidEvent(
            time=time.time() if now is None else now,
            gpu=gpu.index,
            xid=xid,
            pid=None if no_process else 4000000 + (state.seed + len(state.xids)) % 900000,
            process="<unknown>" if no_process else "python3",
            message=message,
        )
    )
    gpu.last_xid = xid
    if xid in _RESET_XIDS:
        gpu.reset_required = True
        gpu.drain_and_reset_recommended = xid != 79
    action = _XID_RECOVERY.get(xid, RECOVERY_NONE)
    if _RECOVERY_RANK.get(action, 0) > _RECOVERY_RANK.get(gpu.recovery_action, 0):
        gpu.recovery_action = action


def _xid(state: NodeHardware, spec: FaultSpec) -> None:
    xid = _int(spec, spec.value, "an XID number (xid=79)")
    if xid <= 0:
        raise FaultError(f"fault 'xid': XID must be positive, not {xid}")
    add_xid(state, _gpu(state, spec, spec.params.get("gpu")), xid)


def _ecc_dbe(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    count = _int(spec, spec.params.get("count"), "count", default=1)
    gpu.ecc_dbe_volatile += count
    gpu.ecc_dbe_aggregate += count
    # Hopper repairs HBM by remapping rows rather than retiring pages; the remap waits for a reset.
    gpu.remapped_rows_uncorrectable += count
    gpu.remapped_rows_pending = True
    add_xid(state, gpu, 48)


def _ecc_sbe(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    count = _int(spec, spec.params.get("count"), "count", default=100)
    gpu.ecc_sbe_volatile += count
    gpu.ecc_sbe_aggregate += count


def _row_remap_failure(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    gpu.remapped_rows_failure = True
    gpu.remapped_rows_pending = False
    gpu.remapped_rows_uncorrectable += 8
    add_xid(state, gpu, 64)


def _gpu_missing(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.value if spec.value is not None else spec.params.get("gpu"))
    gpu.present = False


def _ib_down(state: NodeHardware, spec: FaultSpec) -> None:
    name = spec.value or spec.params.get("hca") or "mlx5_0"
    try:
        hca = state.hca(name)
    except KeyError:
        names = ", ".join(h.name for h in state.hcas)
        raise FaultError(f"fault 'ib_down': no HCA {name!r} (have {names})") from None
    hca.settle_traffic()  # the traffic stops with the link
    hca.traffic_bytes_per_s = 0.0
    if hca.state != "Down":
        hca.counters["link_downed"] += 1
        hca.counters["symbol_error"] += 37
    hca.state = "Down"
    hca.physical_state = "Polling"  # port enabled, no peer: what a dead cable or switch port shows
    hca.rate_gbps = 10


def _nvlink_down(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    link = _int(spec, spec.params.get("link"), "link", default=0)
    if not 0 <= link < len(gpu.nvlinks):
        raise FaultError(f"fault 'nvlink_down': no NVLink {link}")
    gpu.nvlinks[link].up = False
    gpu.nvlinks[link].crc_flit_errors += 1024
    add_xid(state, gpu, 74)


def _thermal(state: NodeHardware, spec: FaultSpec) -> None:
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    gpu.temperature_c = 92
    gpu.memory_temperature_c = 99
    gpu.clock_event_reasons = 0x20 | 0x40  # SW thermal + HW thermal slowdown
    gpu.sm_clock_mhz = 1095


def _busy(state: NodeHardware, spec: FaultSpec) -> None:
    """Not a fault: a training job's load, so dashboards and checks see loaded GPUs."""
    which = spec.params.get("gpu", spec.value)
    gpus = state.gpus if which is None else [_gpu(state, spec, which)]
    for g in gpus:
        g.gpu_util_pct, g.mem_util_pct = 100, 62
        g.power_draw_w = 655.0 + g.index
        g.fb_used_mib = 131072
        g.sm_clock_mhz = g.max_sm_clock_mhz
        g.temperature_c, g.memory_temperature_c = 67, 74
        g.clock_event_reasons &= ~0x1  # no longer idle
        # The HCA beside the GPU carries its share of the job's traffic (~320 of 400 Gb/s).
        hca = state.hcas[g.index] if g.index < len(state.hcas) else None
        if hca is not None and hca.state == "Active":
            hca.settle_traffic()
            hca.traffic_bytes_per_s = 40e9


def _exporter_down(state: NodeHardware, spec: FaultSpec) -> None:
    which = spec.value or "all"
    if which not in ("all", "dcgm", "node"):
        raise FaultError(f"fault 'exporter_down': want all, dcgm or node, not {which!r}")
    if which in ("all", "dcgm"):
        state.dcgm_exporter_up = False
    if which in ("all", "node"):
        state.node_exporter_up = False


def _slurmd_stopped(state: NodeHardware, spec: FaultSpec) -> None:
    state.slurmd_up = False


def _diag_killed(state: NodeHardware, spec: FaultSpec) -> None:
    state.diag_killed = True


def boot_time(now: float) -> float:
    """The kernel's btime for a boot that happens ``now``: whole seconds, and after every moment the
    node served before it (a real reboot takes minutes; the simulated one is instant, so the second
    is rounded up rather than down)."""
    return float(math.ceil(now))


def _clock_step(state: NodeHardware, spec: FaultSpec) -> None:
    """The wall clock is stepped (chrony's first sync after a bad RTC, a clock set by hand): the
    kernel's btime, wall time minus uptime, moves with it; the boot and its boot_id do not."""
    try:
        seconds = float(spec.value or "")
    except ValueError:
        raise FaultError(f"fault 'clock_step': want a number of seconds, not {spec.value!r}") from None
    if not math.isfinite(seconds) or seconds == 0:
        raise FaultError(f"fault 'clock_step': want a non-zero number of seconds, not {spec.value!r}")
    state.boot_time += seconds


def _idle(gpu: Gpu, healthy: Gpu, now: float) -> None:
    """What a GPU reset does to one GPU: the job on it is gone, volatile error state clears, a
    pending row remap takes effect; the aggregate counters and remapped rows stay."""
    gpu.ecc_sbe_volatile = gpu.ecc_dbe_volatile = 0
    gpu.remapped_rows_pending = False
    gpu.retired_pages_pending = False
    gpu.reset_required = gpu.drain_and_reset_recommended = False
    gpu.recovery_action = RECOVERY_NONE
    gpu.last_xid = 0
    gpu.dcgm_xid_since = now
    for link in gpu.nvlinks:  # links retrain; their error counters restart with the device
        link.up = True
        link.crc_flit_errors = link.crc_data_errors = link.replay_errors = link.recovery_errors = 0
    for name in (
        "temperature_c",
        "memory_temperature_c",
        "power_draw_w",
        "sm_clock_mhz",
        "gpu_util_pct",
        "mem_util_pct",
        "fb_used_mib",
        "clock_event_reasons",
    ):
        setattr(gpu, name, getattr(healthy, name))


def _gpu_reset(state: NodeHardware, spec: FaultSpec) -> None:
    """``nvidia-smi -r -i K``: one GPU starts again within the same boot."""
    gpu = _gpu(state, spec, spec.params.get("gpu", spec.value))
    if not gpu.present:
        raise FaultError(f"fault 'gpu_reset': GPU {gpu.index} is not on the bus; only a reboot reaches it")
    if gpu.recovery_action == RECOVERY_NODE_REBOOT:
        # nvidia-smi -r refuses a GPU the driver has lost (XID 79): the node needs a reboot
        raise FaultError(f"fault 'gpu_reset': GPU {gpu.index} needs a node reboot, a reset cannot recover it")
    now = time.time()
    _idle(gpu, make_node(state.node).gpu(gpu.index), now)
    hca = state.hcas[gpu.index] if gpu.index < len(state.hcas) else None
    if hca is not None and hca.traffic_bytes_per_s:
        hca.settle_traffic(now)  # the job that drove this GPU's HCA is gone
        hca.traffic_bytes_per_s = 0.0


def _reboot(state: NodeHardware, spec: FaultSpec) -> None:
    new_boot(state)


def new_boot(state: NodeHardware, now: float | None = None) -> NodeHardware:
    """A real reboot, in place (and returned): a new boot time and an empty kernel log; every GPU
    and HCA starts again, the services start (slurmd, the exporters); damage stays until ``heal``
    (a GPU off the bus, a failed row remap, remapped rows, aggregate ECC counts, an InfiniBand port
    whose cable or switch port is dead)."""
    now = time.time() if now is None else now
    healthy = make_node(state.node)
    state.boot_time = boot_time(now)
    state.boot_id = new_boot_id()
    state.xids = []
    for gpu in state.gpus:
        _idle(gpu, healthy.gpu(gpu.index), now)
        gpu.pcie_replays = 0
    for hca in state.hcas:  # the jobs are gone
        hca.settle_traffic(now)
        hca.traffic_bytes_per_s = 0.0
    state.slurmd_up = state.dcgm_exporter_up = state.node_exporter_up = True
    state.diag_killed = False
    return state


FAULTS: dict[str, tuple[Callable[[NodeHardware, FaultSpec], None], str]] = {
    "xid": (_xid, "xid=N[,gpu=K]: the driver reports XID N on GPU K (default 0)"),
    "ecc_dbe": (_ecc_dbe, "ecc_dbe[,gpu=K][,count=N]: uncorrectable ECC error (XID 48, row remap pending)"),
    "ecc_sbe": (_ecc_sbe, "ecc_sbe[,gpu=K][,count=N]: correctable ECC errors"),
    "row_remap_failure": (_row_remap_failure, "row_remap_failure[,gpu=K]: row remapping failed (XID 64)"),
    "gpu_missing": (_gpu_missing, "gpu_missing=K: GPU K is gone from the bus and from every tool"),
    "ib_down": (_ib_down, "ib_down=mlx5_N: that HCA's port goes Down/Polling"),
    "nvlink_down": (_nvlink_down, "nvlink_down[,gpu=K][,link=L]: an NVLink goes down (XID 74)"),
    "thermal": (_thermal, "thermal[,gpu=K]: overheating, clocks slowed by thermal events"),
    "busy": (_busy, "busy[,gpu=K]: GPUs under a training load (all GPUs by default)"),
    "exporter_down": (_exporter_down, "exporter_down[=all|dcgm|node]: the metrics endpoint stops"),
    "slurmd_stopped": (_slurmd_stopped, "slurmd_stopped: the node's slurmd is stopped"),
    "diag_killed": (
        _diag_killed,
        "diag_killed: the DCGM diagnostic's process dies (a timeout, the OOM killer): dcgmi diag "
        "prints its runtime_error and exits 203; health checks still answer",
    ),
    "gpu_reset": (
        _gpu_reset,
        "gpu_reset[,gpu=K]: nvidia-smi -r on GPU K: its volatile errors, pending remap, recovery "
        "action and DCGM's XIDs clear; same boot",
    ),
    "clock_step": (
        _clock_step,
        "clock_step=SECONDS: the wall clock is stepped by SECONDS (negative: back): the boot time "
        "(node_boot_time_seconds) moves by as much, the boot and its boot_id stay",
    ),
    "reboot": (
        _reboot,
        "reboot: a new boot: XIDs, volatile ECC, pending remaps and recovery actions clear, links and "
        "services come up; a missing GPU, a failed remap or a dead IB port stays until heal",
    ),
}


def fault_help() -> str:
    return "\n".join(f"  {help_}" for _, help_ in FAULTS.values())


def apply_fault(state: NodeHardware, spec: str) -> NodeHardware:
    """Apply one fault to ``state`` in place (and return it). Unknown or bad faults change nothing."""
    parsed = parse_spec(spec)
    entry = FAULTS.get(parsed.name)
    if entry is None:
        raise FaultError(f"unknown fault {parsed.name!r}; known: {', '.join(sorted(FAULTS))}")
    # Apply to a copy first so that a bad argument leaves the state untouched.
    trial = NodeHardware.from_dict(state.to_dict())
    entry[0](trial, parsed)
    trial.faults.append(spec)
    state.__dict__.update(trial.__dict__)
    return state


def heal(state: NodeHardware, *, now: float | None = None) -> NodeHardware:
    """Return the node to its healthy seeded hardware, in place (and return it). A repaired node
    has been rebooted: its boot time is now."""
    now = time.time() if now is None else now
    fresh = make_node(state.node, now=now, hca_layout=state.hca_layout)
    fresh.boot_time = boot_time(now)
    fresh.boot_id = new_boot_id()
    state.__dict__.update(fresh.__dict__)
    return state
