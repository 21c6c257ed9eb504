"""The data that flows from evidence sources to checks.

``None`` always means "this source did not tell us", never "zero" or "fine": a check that meets
``None`` answers UNKNOWN (or is skipped when the source never provides that fact at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# What an Evidence.boot_id is: the kernel's boot_id, or the boot time (a clock step moves it)
BOOT_KERNEL = "kernel"
BOOT_BTIME = "btime"
BOOT_KINDS = (BOOT_KERNEL, BOOT_BTIME)

# Names of the facts a source may provide; checks declare which one they need.
FACTS = (
    "gpu_count",
    "xid",
    "ecc",
    "ecc_sbe_rate",
    "retired_pages",
    "row_remap",
    "nvlink",
    "nvlink_crc",
    "pcie",
    "throttle",
    "ib",
    "ib_errors",
    "mounts",
    "slurmd",
    "dcgm",
    "recovery",  # what the driver says each GPU needs (recovery action, reset required)
    "fabric",  # NVLink fabric registration of each GPU with the fabric manager
    "sxid",  # NVSwitch SXid events
    "lustre",  # the Lustre client probe (lctl ping, lfs check servers, a timed write)
)


@dataclass
class XidEvent:
    xid: int
    gpu: int | None = None
    count: int = 1
    time: float | None = None  # unix seconds of the (last) occurrence, when known
    boot_id: str = ""  # the kernel boot the event belongs to, when known
    message: str = ""
    mono: float | None = None  # the kernel's stamp (seconds since boot): identifies a log line
    # counted XIDs: whether the node's latest data still counts it. A count restarts with the node,
    # so True places it in the current boot even when that boot's start is unknown; False leaves
    # it unplaced then. None: the source cannot say (a log line, a last-value gauge).
    counted_now: bool | None = None
    # XID 154 ("GPU recovery action changed") from a source without its message (an exporter's
    # count or last value): the recovery action the same source serves for that GPU now (the
    # evidence name, GpuEvidence.recovery_action) and the series and value it read ("<name>=2");
    # the XID takes its class from it. None: the source serves no recovery action for that GPU.
    recovery_action: str | None = None
    recovery_from: str = ""
    # a last-XID gauge's XID that no count of the XID window shows (Prometheus scraped nothing while
    # dcgm-exporter counted it: stopped longer than the exporter's window); the check keeps only
    # the ones whose fix is a reboot or a replacement, which the gauge shows until that fix
    uncounted: bool = False


@dataclass
class SxidEvent:
    """An NVSwitch SXid from the kernel log (``nvidia-nvswitchN: SXid (PCI:...): 12028, Non-fatal``)."""

    sxid: int
    switch: str = ""  # the NVSwitch's PCI address, "0000:85:00"
    fatal: bool | None = None  # as the kernel line says ("Fatal" / "Non-fatal"), None if it does not
    count: int = 1
    time: float | None = None
    boot_id: str = ""
    message: str = ""
    mono: float | None = None


@dataclass
class GpuEvidence:
    index: int
    uuid: str = ""
    pci_bus_id: str = ""
    model: str = ""
    ecc_dbe_volatile: int | None = None
    ecc_sbe_volatile: int | None = None
    ecc_sbe_per_hour: float | None = None  # rate over the source's window
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    nvlink_links_total: int | None = None
    nvlink_links_down: int | None = None
    nvlink_crc_per_second: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    # what the driver says the GPU needs now (NVML nvmlDeviceGetGpuRecoveryAction, DCGM field 1523
    # DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION): none | reset | reboot | drain_p2p | drain_and_reset
    recovery_action: str | None = None
    reset_required: bool | None = None  # nvidia-smi -q "GPU Reset Status / Reset Required"
    thermal_throttle: bool | None = None
    power_throttle: bool | None = None  # hardware power brake, not the normal software cap
    temperature_c: float | None = None
    # nvidia-smi -q "Fabric" section (NVSwitch systems): State Completed / In Progress / Not Started /
    # Not Supported, Status Success / N/A / an error; None when not reported
    fabric_state: str | None = None
    fabric_status: str | None = None


@dataclass
class IbPortEvidence:
    device: str
    port: int
    state: str | None = None  # ACTIVE, DOWN, INIT, ARMED (upper case, as sysfs prints it)
    phys_state: str | None = None  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None = None
    link_layer: str | None = None
    counter_deltas: dict[str, int] | None = None  # increase over the source's window
    window_seconds: float | None = None


@dataclass
class MountEvidence:
    path: str
    fstype: str = ""
    present: bool | None = None
    responsive: bool | None = None
    detail: str = ""


@dataclass
class LustreEvidence:
    """The Lustre client probe on one node: ``problems`` names each failed step (empty: healthy),
    ``timed_out`` the steps that did not answer in time (judged UNKNOWN, not failed)."""

    mount: str
    mounted: bool
    problems: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    nids_pinged: int = 0
    servers_active: int = 0
    write_seconds: float | None = None
    write_bytes: int = 0


@dataclass
class Evidence:
    """Everything one source learned about one node in one collection."""

    node: str
    source: str
    collected_at: float
    reachable: bool = True
    # when the facts were observed, where that is not the collection: Prometheus's newest sample
    # of the node (its last scrape), which several passes in one scrape interval all read again.
    # None: observed at collected_at (direct sources: SSH, DCGM)
    observed_at: float | None = None
    error: str = ""  # why the node could not be read (unreachable, stale series, ...)
    boot_id: str = ""  # current kernel boot, when known: XIDs of earlier boots are history
    # what boot_id is (BOOT_KINDS): "kernel", the kernel's random boot_id
    # (/proc/sys/kernel/random/boot_id), new at every boot and nothing else; "btime", the boot time
    # as "boot-<whole seconds>" (node_boot_time_seconds), which a clock step moves too; "" with no id
    boot_kind: str = ""
    boot_time: float | None = None  # unix seconds the current boot started, when known
    gpu_count: int | None = None
    gpus: list[GpuEvidence] = field(default_factory=list)
    xids: list[XidEvent] | None = None
    ib_ports: list[IbPortEvidence] | None = None
    mounts: list[MountEvidence] | None = None
    slurmd_alive: bool | None = None
    # DCGM's own verdicts (health watches, diagnostics): {"gpu", "system", "status", "message"}
    dcgm_incidents: list[dict[str, Any]] | None = None
    # probes that did not answer in time in this collection (a hung mount "mount:/lustre", a hung
    # "nvidia-smi"): UNKNOWN now, FAIL (code probe-hung) after several passes in a row
    probe_timeouts: list[str] = field(default_factory=list)
    # how the XIDs were learnt: "count" (DCGM_EXP_XID_ERRORS_COUNT over a window), "last-value"
    # (DCGM_FI_DEV_XID_ERRORS only: a later harmless XID hides a fatal one), "kernel-log" (dmesg or
    # the journal); "" when the source reports no XIDs at all
    xid_mode: str = ""
    provides: frozenset[str] = frozenset()  # facts this source reports for every node
    raw: dict[str, Any] = field(default_factory=dict)  # source-specific extra detail
    sxids: list[SxidEvent] | None = None  # NVSwitch SXids; None: the source could not read them
    lustre: LustreEvidence | None = None  # the Lustre probe, where [health] lustre_mount is set
