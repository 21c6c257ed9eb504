"""The metrics a real H200 node exposes, computed from its simulated state on every scrape.

Two exporters, as on the real node, each on its own endpoint:

- dcgm-exporter: exactly the fields its counters file lists (``collectors``), in file order, typed
  and described as the file says, with its labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
  ``modelName``, ``Hostname`` and one label per ``label`` row of the file; plus its XID collector's
  ``DCGM_EXP_XID_ERRORS_COUNT`` when the file lists it. A field the file leaves out is absent.
- node_exporter: the stat collector's boot time, the infiniband collector's
  ``node_infiniband_*{device,port}``, and the textfile collector serving the node_exporter role's
  boot id file (``opsctl_boot_id_info{boot_id}``, the kernel's boot_id).

``render_text`` writes the Prometheus text format the way those Go exporters do: ``# TYPE`` names
equal to sample names (dcgm-exporter's counters carry no ``_total``), labels in emission order, and
Go's float formatting.
"""

from __future__ import annotations

import decimal
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opsctl.hwsim import collectors, storage
from opsctl.hwsim.render_ib import firmware, phys_state_id, state_id
from opsctl.hwsim.state import HCA_BOARD_ID, PRODUCT_NAME, Gpu, NodeHardware

XID_WINDOW_MS = 300000  # dcgm-exporter's default --xid-count-window-size (5 minutes)
TENSOR_SHARE = 0.45  # share of SM-busy time the tensor pipes are active under the simulated load


@dataclass
class Sample:
    labels: dict[str, str]
    value: float
    as_float: bool = False  # dcgm-exporter prints double fields with %f


@dataclass
class Family:
    name: str
    type: str  # gauge | counter
    help: str
    samples: list[Sample] = field(default_factory=list)


def _gpu_labels(
    state: NodeHardware, g: Gpu, label_fields: Sequence[str] = (), hostname: str | None = None
) -> dict[str, str]:
    """dcgm-exporter's labels of a GPU series, then the counters file's ``label`` fields in order.
    ``hostname``: what the exporter's release and flags name the node (dcgm_exporter.hostname_label),
    by default the node's own name."""
    labels = {
        "gpu": str(g.index),
        "UUID": g.uuid,
        "pci_bus_id": g.bus_id,
        "device": f"nvidia{g.index}",
        "modelName": PRODUCT_NAME,
        "Hostname": state.node if hostname is None else hostname,
    }
    for name in label_fields:
        labels[name] = LABEL_FIELDS[name](state, g)
    return labels


def _flit(g: Gpu) -> int:
    return sum(n.crc_flit_errors for n in g.nvlinks)


# DCGM field -> (its value for a GPU, printed as a double). dcgm-exporter takes each family's type
# and help from the counters file; these are the values a simulated H200 has for them.
DCGM_FIELDS: dict[str, tuple[Callable[[Gpu], float], bool]] = {
    "DCGM_FI_DEV_SM_CLOCK": (lambda g: g.sm_clock_mhz, False),
    "DCGM_FI_DEV_MEM_CLOCK": (lambda g: g.memory_clock_mhz, False),
    "DCGM_FI_DEV_MEMORY_TEMP": (lambda g: g.memory_temperature_c, False),
    "DCGM_FI_DEV_GPU_TEMP": (lambda g: g.temperature_c, False),
    "DCGM_FI_DEV_POWER_USAGE": (lambda g: g.power_draw_w, True),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (lambda g: g.energy_mj, False),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (lambda g: g.pcie_replays, False),
    "DCGM_FI_DEV_PCIE_LINK_GEN": (lambda g: g.pcie_gen_current, False),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": (lambda g: g.pcie_width_current, False),
    "DCGM_FI_DEV_GPU_UTIL": (lambda g: g.gpu_util_pct, False),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (lambda g: g.mem_util_pct, False),
    "DCGM_FI_DEV_ENC_UTIL": (lambda g: 0, False),
    "DCGM_FI_DEV_DEC_UTIL": (lambda g: 0, False),
    # sticky: the last XID DCGM saw on the GPU, until its field cache starts again (a GPU reset
    # restarts the host engine, a reboot everything); time alone never clears it
    "DCGM_FI_DEV_XID_ERRORS": (lambda g: g.last_xid, False),
    # one bitmask, two names: DCGM 3 calls it throttle reasons, DCGM 4 clocks event reasons
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (lambda g: g.clock_event_reasons, False),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (lambda g: g.clock_event_reasons, False),
    "DCGM_FI_DEV_FB_FREE": (lambda g: g.fb_free_mib, False),
    "DCGM_FI_DEV_FB_USED": (lambda g: g.fb_used_mib, False),
    "DCGM_FI_DEV_FB_RESERVED": (lambda g: g.fb_reserved_mib, False),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (lambda g: g.ecc_sbe_volatile, False),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (lambda g: g.ecc_dbe_volatile, False),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (lambda g: g.ecc_sbe_aggregate, False),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (lambda g: g.ecc_dbe_aggregate, False),
    "DCGM_FI_DEV_RETIRED_SBE": (lambda g: g.retired_pages_sbe, False),
    "DCGM_FI_DEV_RETIRED_DBE": (lambda g: g.retired_pages_dbe, False),
    "DCGM_FI_DEV_RETIRED_PENDING": (lambda g: int(g.retired_pages_pending), False),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (_flit, False),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (
        lambda g: sum(n.crc_data_errors for n in g.nvlinks),
        False,
    ),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (lambda g: sum(n.replay_errors for n in g.nvlinks), False),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (
        lambda g: sum(n.recovery_errors for n in g.nvlinks),
        False,
    ),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (lambda g: g.nvlink_bandwidth_total, False),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (lambda g: g.remapped_rows_uncorrectable, False),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (lambda g: g.remapped_rows_correctable, False),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (lambda g: int(g.remapped_rows_failure), False),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": (lambda g: int(g.remapped_rows_pending), False),
    # field 1523, DCGM >= 4.5; renamed DCGM_FI_DEV_GPU_RECOVERY_ACTION in 4.6
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": (lambda g: g.recovery_action, False),
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION": (lambda g: g.recovery_action, False),
    # profiling ratios: the simulated load keeps the tensor pipes and HBM busy in step with SM use
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (lambda g: g.gpu_util_pct / 100.0, True),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (lambda g: g.gpu_util_pct * TENSOR_SHARE / 100.0, True),
    "DCGM_FI_PROF_DRAM_ACTIVE": (lambda g: g.mem_util_pct / 100.0, True),
}
# Fields a counters file may list with type "label".
LABEL_FIELDS: dict[str, Callable[[NodeHardware, Gpu], str]] = {
    "DCGM_FI_DRIVER_VERSION": lambda s, g: s.driver_version,
    "DCGM_FI_NVML_VERSION": lambda s, g: f"12.{s.driver_version}",
    "DCGM_FI_DEV_SERIAL": lambda s, g: g.serial,
    "DCGM_FI_DEV_NAME": lambda s, g: PRODUCT_NAME,
}
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # dcgm-exporter's own XID collector
KNOWN = frozenset({*DCGM_FIELDS, *LABEL_FIELDS, XID_COUNT})


# Every field the simulator models, under DCGM 4.5's names, with dcgm-exporter's help texts: a
# counters file for tests of what reads exporter output (``families``), not one any role ships.
EVERY_FIELD_CSV = """\
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_PCIE_LINK_GEN, gauge, PCIe link generation.
DCGM_FI_DEV_PCIE_LINK_WIDTH, gauge, PCIe link width.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Current clock event reasons (bitmask).
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, counter, Total number of single-bit persistent ECC errors.
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, counter, Total number of double-bit persistent ECC errors.
DCGM_FI_DEV_RETIRED_SBE, counter, Total number of retired pages due to single-bit errors.
DCGM_FI_DEV_RETIRED_DBE, counter, Total number of retired pages due to double-bit errors.
DCGM_FI_DEV_RETIRED_PENDING, counter, Total number of pages pending retirement.
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink flow-control CRC errors.
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, counter, Total number of NVLink data CRC errors.
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, counter, Total number of NVLink retries.
DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, counter, Total number of NVLink recovery errors.
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed
DCGM_FI_DEV_ROW_REMAP_PENDING, gauge, Whether remapping of rows is pending
DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, gauge, Recovery action the driver asks for.
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID Errors within user-specified time window.
"""


def load_collectors(path: str | Path) -> list[collectors.Counter]:
    """Read a counters file as the simulated dcgm-exporter would (unknown fields refused)."""
    return collectors.load(path, KNOWN)


def parse_collectors(text: str, source: str = "<counters>") -> list[collectors.Counter]:
    return collectors.parse(text, source, KNOWN)


def dcgm_families(
    state: NodeHardware,
    counters: Sequence[collectors.Counter],
    *,
    now: float | None = None,
    xid_window_ms: int = XID_WINDOW_MS,
    hostname: str | None = None,
    jobs: Mapping[int, Sequence[str]] | None = None,
) -> list[Family]:
    """dcgm-exporter's families for the fields of its counters file, in file order, with the file's
    type and help; the XID collector's family last. A missing GPU has no series at all, as when
    NVML loses it. ``jobs``: the Slurm jobs on each GPU (``--hpc-job-mapping-dir``, read_job_mapping):
    the field series of such a GPU come once per job, labelled ``hpc_job``, as the exporter's HPC
    mapper copies them (pkg/dcgmexporter/hpc.go; its XID collector is not mapped)."""
    now = time.time() if now is None else now
    gpus = state.present_gpus
    label_fields = [c.field for c in counters if c.type == "label"]
    families: list[Family] = []
    for c in counters:
        if c.type == "label" or c.field == XID_COUNT:
            continue
        getter, as_float = DCGM_FIELDS[c.field]
        fam = Family(c.field, c.type, c.help)
        for g in gpus:
            labels = _gpu_labels(state, g, label_fields, hostname)
            on_gpu = (jobs or {}).get(g.index)
            # an empty file drops the GPU's series, as the exporter's mapper does (the role's
            # epilog removes the file with its last job)
            copies = [labels | {"hpc_job": job} for job in on_gpu] if on_gpu is not None else [labels]
            fam.samples.extend(Sample(copy, float(getter(g)), as_float) for copy in copies)
        families.append(fam)
    if any(c.field == XID_COUNT for c in counters):
        families.append(
            xid_count_family(
                state, now=now, window_ms=xid_window_ms, label_fields=label_fields, hostname=hostname
            )
        )
    return families


def read_job_mapping(directory: Path) -> dict[int, list[str]]:
    """dcgm-exporter's HPC job mapping: one file per GPU, named by its index, a job id per line;
    other names, directories and a missing directory are ignored, as the exporter ignores them."""
    out: dict[int, list[str]] = {}
    if not directory.is_dir():
        return out
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name.isdigit():
            out[int(path.name)] = path.read_text().splitlines()  # every line, as its scanner reads
    return out


def xid_count_family(
    state: NodeHardware,
    *,
    now: float,
    window_ms: int = XID_WINDOW_MS,
    label_fields: Sequence[str] = (),
    hostname: str | None = None,
) -> Family:
    """``DCGM_EXP_XID_ERRORS_COUNT`` as dcgm-exporter's XID collector builds it: per GPU, one series
    per XID seen by DCGM within the window (label ``xid``), or one zero series without ``xid``
    when there was none."""
    xid = Family(
        "DCGM_EXP_XID_ERRORS_COUNT",
        "gauge",
        "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
    )
    window_start = now - window_ms / 1000.0
    for g in state.present_gpus:
        counts: dict[int, int] = {}
        for e in state.xids:
            if e.gpu == g.index and e.time >= max(window_start, g.dcgm_xid_since):
                counts[e.xid] = counts.get(e.xid, 0) + 1
        labels = _gpu_labels(state, g, label_fields, hostname) | {"window_size_in_ms": str(window_ms)}
        if not counts:
            xid.samples.append(Sample(labels, 0.0))
        for code, n in sorted(counts.items()):
            xid.samples.append(Sample(labels | {"xid": str(code)}, float(n)))
    return xid


_IB_COUNTERS = (
    (
        "excessive_buffer_overrun_errors_total",
        "excessive_buffer_overrun_errors",
        1,
        "Number of times that OverrunErrors consecutive flow control update periods occurred, "
        "each having at least one overrun error.",
    ),
    (
        "link_downed_total",
        "link_downed",
        1,
        "Number of times the link failed to recover from an error state and went down",
    ),
    (
        "link_error_recovery_total",
        "link_error_recovery",
        1,
        "Number of times the link successfully recovered from an error state",
    ),
    (
        "local_link_integrity_errors_total",
        "local_link_integrity_errors",
        1,
        "Number of times that the count of local physical errors exceeded the threshold specified by "
        "LocalPhyErrors.",
    ),
    (
        "multicast_packets_received_total",
        "multicast_rcv_packets",
        1,
        "Number of multicast packets received (including errors)",
    ),
    (
        "multicast_packets_transmitted_total",
        "multicast_xmit_packets",
        1,
        "Number of multicast packets transmitted (including errors)",
    ),
    (
        "port_constraint_errors_received_total",
        "port_rcv_constraint_errors",
        1,
        "Number of packets received on the switch physical port that are discarded",
    ),
    (
        "port_constraint_errors_transmitted_total",
        "port_xmit_constraint_errors",
        1,
        "Number of packets not transmitted from the switch physical port",
    ),
    # The data counters count 32-bit words; node_exporter reports octets.
    ("port_data_received_bytes_total", "port_rcv_data", 4, "Number of data octets received on all links"),
    (
        "port_data_transmitted_bytes_total",
        "port_xmit_data",
        4,
        "Number of data octets transmitted on all links",
    ),
    (
        "port_discards_transmitted_total",
        "port_xmit_discards",
        1,
        "Number of outbound packets discarded by the port because the port is down or congested",
    ),
    (
        "port_errors_received_total",
        "port_rcv_errors",
        1,
        "Number of packets containing an error that were received on this port",
    ),
    (
        "port_packets_received_total",
        "port_rcv_packets",
        1,
        "Number of packets received on all VLs by this port (including errors)",
    ),
    (
        "port_packets_transmitted_total",
        "port_xmit_packets",
        1,
        "Number of packets transmitted on all VLs from this port (including errors)",
    ),
    (
        "port_transmit_wait_total",
        "port_xmit_wait",
        1,
        "Number of ticks during which the port had data to transmit but no data was sent during the "
        "entire tick",
    ),
    (
        "unicast_packets_received_total",
        "unicast_rcv_packets",
        1,
        "Number of unicast packets received (including errors)",
    ),
    (
        "unicast_packets_transmitted_total",
        "unicast_xmit_packets",
        1,
        "Number of unicast packets transmitted (including errors)",
    ),
    (
        "port_receive_remote_physical_errors_total",
        "port_rcv_remote_physical_errors",
        1,
        "Number of packets marked with the EBP (End of Bad Packet) delimiter received on the port.",
    ),
    (
        "port_receive_switch_relay_errors_total",
        "port_rcv_switch_relay_errors",
        1,
        "Number of packets that could not be forwarded by the switch.",
    ),
    (
        "symbol_error_total",
        "symbol_error",
        1,
        "Number of minor link errors detected on one or more physical lanes.",
    ),
    (
        "vl15_dropped_total",
        "VL15_dropped",
        1,
        "Number of incoming VL15 packets dropped due to resource limitations.",
    ),
)


def infiniband_families(state: NodeHardware, *, now: float | None = None) -> list[Family]:
    """node_exporter's infiniband collector, from the same data it reads in /sys/class/infiniband."""
    p = "node_infiniband_"
    info = Family(
        p + "info", "gauge", "Non-numeric data from /sys/class/infiniband/<device>, value is always 1."
    )
    st = Family(
        p + "state_id",
        "gauge",
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
    )
    ph = Family(
        p + "physical_state_id",
        "gauge",
        "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, "
        "4: shift, 5: link up, 6: link error recover, 7: phytest)",
    )
    rate = Family(p + "rate_bytes_per_second", "gauge", "Maximum signal transfer rate")
    counters = [Family(p + name, "counter", help_) for name, _, _, help_ in _IB_COUNTERS]
    for h in sorted(state.hcas, key=lambda h: h.name):
        info.samples.append(
            Sample(
                {
                    "device": h.name,
                    "board_id": HCA_BOARD_ID,
                    "firmware_version": firmware(h),
                    "hca_type": h.ca_type,
                },
                1.0,
            )
        )
        labels = {"device": h.name, "port": "1"}
        st.samples.append(Sample(labels, float(state_id(h))))
        ph.samples.append(Sample(labels, float(phys_state_id(h))))
        rate.samples.append(Sample(labels, h.rate_gbps * 1e9 / 8))
        values = h.current_counters(now)
        for fam, (_, key, scale, _) in zip(counters, _IB_COUNTERS, strict=True):
            fam.samples.append(Sample(labels, float(values.get(key, 0) * scale)))
    return [info, st, ph, rate, *counters]


def stat_families(state: NodeHardware) -> list[Family]:
    """node_exporter's stat collector (on by default), of which opsctl reads the boot time: the
    integer ``btime`` of /proc/stat."""
    boot = Family("node_boot_time_seconds", "gauge", "Node boot time, in unixtime.")
    boot.samples.append(Sample({}, float(int(state.boot_time))))
    return [boot]


# The node_exporter role's opsctl-boot-id unit writes this file at every boot into the textfile
# collector's directory (roles/node_exporter/templates/opsctl-boot-id.sh.j2, the same HELP)
BOOT_ID_METRIC = "opsctl_boot_id_info"
BOOT_ID_HELP = "The kernel's boot_id of the running boot (/proc/sys/kernel/random/boot_id)."


def boot_id_families(state: NodeHardware) -> list[Family]:
    """node_exporter's textfile collector serving the role's boot id file: one series whose
    ``boot_id`` label is the kernel's boot_id (new at each boot, unmoved by a clock step)."""
    info = Family(BOOT_ID_METRIC, "gauge", BOOT_ID_HELP)
    info.samples.append(Sample({"boot_id": state.boot_id}, 1.0))
    return [info]


def families(
    state: NodeHardware,
    counters: Sequence[collectors.Counter] | None = None,
    *,
    now: float | None = None,
    xid_window_ms: int = XID_WINDOW_MS,
) -> list[Family]:
    """Both exporters' families of a node whose exporters are up; ``counters`` defaults to every
    field the simulator models (``EVERY_FIELD_CSV``)."""
    out: list[Family] = []
    if state.dcgm_exporter_up:
        rows = parse_collectors(EVERY_FIELD_CSV) if counters is None else counters
        out += dcgm_families(state, rows, now=now, xid_window_ms=xid_window_ms)
    if state.node_exporter_up:
        out += node_families(state, now=now)
    return out


def node_families(state: NodeHardware, *, now: float | None = None) -> list[Family]:
    """node_exporter's families the simulator serves: the stat collector's boot time, the textfile
    collector's boot id (the role's file), the filesystem, nfs and infiniband collectors (all on by
    default in node_exporter 1.5 and 1.9; the role names infiniband anyway, --collector.infiniband,
    so that a site turning defaults off keeps it). The real exporter serves many more (cpu,
    memory, ...) that nothing in opsctl reads."""
    now = time.time() if now is None else now
    return (
        stat_families(state)
        + boot_id_families(state)
        + filesystem_families(state)
        + nfs_families(state, now)
        + infiniband_families(state, now=now)
    )


def filesystem_families(state: NodeHardware) -> list[Family]:
    """node_exporter's filesystem collector: statfs() of each mount, labelled device, fstype and
    mountpoint (node_exporter 1.5, Debian 12)."""
    p = "node_filesystem_"
    fams = {
        "avail_bytes": Family(
            p + "avail_bytes", "gauge", "Filesystem space available to non-root users in bytes."
        ),
        "device_error": Family(
            p + "device_error",
            "gauge",
            "Whether an error occurred while getting statistics for the given device.",
        ),
        "files": Family(p + "files", "gauge", "Filesystem total file nodes."),
        "files_free": Family(p + "files_free", "gauge", "Filesystem total free file nodes."),
        "free_bytes": Family(p + "free_bytes", "gauge", "Filesystem free space in bytes."),
        "readonly": Family(p + "readonly", "gauge", "Filesystem read-only status."),
        "size_bytes": Family(p + "size_bytes", "gauge", "Filesystem size in bytes."),
    }
    for fs in storage.filesystems(state):
        m = fs.mount
        labels = {"device": m.device, "fstype": m.fstype, "mountpoint": m.mountpoint}
        values = {
            "avail_bytes": fs.avail_bytes,
            "device_error": 0,
            "files": m.files,
            "files_free": fs.files_free,
            "free_bytes": fs.free_bytes,
            "readonly": 0,
            "size_bytes": m.size_bytes,
        }
        for key, fam in fams.items():
            fam.samples.append(Sample(dict(labels), float(values[key])))
    return list(fams.values())


def nfs_families(state: NodeHardware, now: float) -> list[Family]:
    """node_exporter's nfs collector (/proc/net/rpc/nfs): the client's RPC counters."""
    rpcs = Family("node_nfs_rpcs_total", "counter", "Total number of RPCs performed.")
    rpcs.samples.append(Sample({}, float(storage.nfs_rpcs(state, now))))
    retrans = Family(
        "node_nfs_rpc_retransmissions_total", "counter", "Number of RPC transmissions performed."
    )
    retrans.samples.append(Sample({}, 0.0))
    refresh = Family(
        "node_nfs_rpc_authentication_refreshes_total",
        "counter",
        "Number of RPC authentication refreshes performed.",
    )
    refresh.samples.append(Sample({}, 0.0))
    return [rpcs, retrans, refresh]


def go_float(value: float) -> str:
    """Format like Go's ``strconv.FormatFloat(v, 'g', -1, 64)``, as client_golang writes values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    d = decimal.Decimal(repr(value))
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    digs = "".join(map(str, digits)).rstrip("0") or "0"
    exp = len(digits) + exponent - 1  # decimal exponent of the leading digit
    neg = "-" if sign else ""
    # Shortest formatting decides with precision 6: %e below 1e-4 or from 1e6 up.
    if exp < -4 or exp >= 6:
        mant = digs[0] + ("." + digs[1:] if len(digs) > 1 else "")
        return f"{neg}{mant}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return neg + format(abs(d).normalize(), "f")


def _value(sample: Sample, go: bool) -> str:
    if go:
        return go_float(sample.value)
    if sample.as_float:
        return f"{sample.value:f}"
    return str(int(sample.value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_text(fams: list[Family]) -> str:
    """Prometheus text format 0.0.4. DCGM families print like dcgm-exporter (ints, ``%f`` doubles),
    node_exporter families like client_golang (Go float formatting)."""
    out: list[str] = []
    for fam in fams:
        go = not fam.name.startswith("DCGM_")
        out.append(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} {fam.type}\n")
        for s in fam.samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
            braces = f"{{{labels}}}" if labels else ""  # no labels: no braces, as the Go writers do
            out.append(f"{fam.name}{braces} {_value(s, go)}\n")
    return "".join(out)
