"""The metrics a real H200 node exposes, computed from its simulated state on every scrape.

Two exporters, as on the real node: dcgm-exporter (``DCGM_FI_*`` fields with its labels ``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, and
the ``DCGM_EXP_XID_ERRORS_COUNT`` exporter field) and node_exporter (the stat collector's boot time
and the infiniband collector's ``node_infiniband_*{device,port}``). ``render_text`` writes the
Prometheus text format the way those Go exporters do: ``# TYPE`` names equal to sample names
(dcgm-exporter's counters carry no ``_total``), labels in emission order, and Go's float formatting.
"""

from __future__ import annotations

import decimal
import math
import time
from dataclasses import dataclass, field

from opsctl.hwsim.render_ib import phys_state_id, state_id
from opsctl.hwsim.state import PRODUCT_NAME, Gpu, NodeHardware

XID_WINDOW_MS = 300000  # dcgm-exporter's default --xid-count-window-size (5 minutes)


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


def _gpu_labels(state: NodeHardware, g: Gpu) -> dict[str, str]:
    return {
        "gpu": str(g.index),
        "UUID": g.uuid,
        "pci_bus_id": g.bus_id,
        "device": f"nvidia{g.index}",
        "modelName": PRODUCT_NAME,
        "Hostname": state.node,
        "DCGM_FI_DRIVER_VERSION": state.driver_version,
    }


# (name, type, help, value of a GPU, printed as a double) in dcgm-exporter's CSV order.
_DCGM_FIELDS: tuple[tuple[str, str, str, object, bool], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz, False),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda g: g.memory_clock_mhz,
        False,
    ),
    (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature (in C).",
        lambda g: g.memory_temperature_c,
        False,
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: g.temperature_c, False),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: g.power_draw_w, True),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda g: g.energy_mj,
        False,
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        lambda g: g.pcie_replays,
        False,
    ),
    ("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe link generation.", lambda g: g.pcie_gen_current, False),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe link width.", lambda g: g.pcie_width_current, False),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: g.gpu_util_pct, False),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda g: g.mem_util_pct, False),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        lambda g: g.last_xid,
        False,
    ),
    (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask).",
        lambda g: g.clock_event_reasons,
        False,
    ),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda g: g.fb_free_mib, False),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda g: g.fb_used_mib, False),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        lambda g: g.fb_reserved_mib,
        False,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        lambda g: g.ecc_sbe_volatile,
        False,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g.ecc_dbe_volatile,
        False,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        lambda g: g.ecc_sbe_aggregate,
        False,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        lambda g: g.ecc_dbe_aggregate,
        False,
    ),
    (
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        lambda g: g.retired_pages_sbe,
        False,
    ),
    (
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        lambda g: g.retired_pages_dbe,
        False,
    ),
    (
        "DCGM_FI_DEV_RETIRED_PENDING",
        "counter",
        "Total number of pages pending retirement.",
        lambda g: int(g.retired_pages_pending),
        False,
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        lambda g: sum(n.crc_flit_errors for n in g.nvlinks),
        False,
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
        lambda g: sum(n.crc_data_errors for n in g.nvlinks),
        False,
    ),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        lambda g: sum(n.replay_errors for n in g.nvlinks),
        False,
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        lambda g: sum(n.recovery_errors for n in g.nvlinks),
        False,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        lambda g: g.remapped_rows_uncorrectable,
        False,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        lambda g: g.remapped_rows_correctable,
        False,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        lambda g: int(g.remapped_rows_failure),
        False,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending",
        lambda g: int(g.remapped_rows_pending),
        False,
    ),
    (
        # DCGM >= 4.5 (field 1523; renamed DCGM_FI_DEV_GPU_RECOVERY_ACTION in 4.6, old name kept)
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "gauge",
        "Recovery action the driver asks for (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, "
        "4 drain and reset).",
        lambda g: g.recovery_action,
        False,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        lambda g: g.gpu_util_pct / 100.0,
        True,
    ),
)


def dcgm_families(
    state: NodeHardware, *, now: float | None = None, xid_window_ms: int = XID_WINDOW_MS
) -> list[Family]:
    """dcgm-exporter's families; a missing GPU has no series at all, as when NVML loses it."""
    now = time.time() if now is None else now
    gpus = state.present_gpus
    families: list[Family] = []
    for name, kind, help_, getter, as_float in _DCGM_FIELDS:
        fam = Family(name, kind, help_)
        for g in gpus:
            fam.samples.append(Sample(_gpu_labels(state, g), float(getter(g)), as_float))  # type: ignore[operator]
        families.append(fam)
    families.append(xid_count_family(state, now=now, window_ms=xid_window_ms))
    return families


def xid_count_family(state: NodeHardware, *, now: float, window_ms: int = XID_WINDOW_MS) -> Family:
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
        labels = _gpu_labels(state, g) | {"window_size_in_ms": str(window_ms)}
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
                    "board_id": "MT_0000000838",
                    "firmware_version": "28.39.1002",
                    "hca_type": "MT4129",
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


def families(
    state: NodeHardware, *, now: float | None = None, xid_window_ms: int = XID_WINDOW_MS
) -> list[Family]:
    out: list[Family] = []
    if state.dcgm_exporter_up:
        out += dcgm_families(state, now=now, xid_window_ms=xid_window_ms)
    if state.node_exporter_up:
        out += stat_families(state) + infiniband_families(state, now=now)
    return out


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
