"""Turn parser output (nvidia-smi, ibstat, sysfs, dmesg) into evidence fields. Pure functions."""

from __future__ import annotations

from opsctl.evidence.model import GpuEvidence, IbPortEvidence, SxidEvent, XidEvent
from opsctl.parsers.dmesg_xid import XidLog, normalise_pci
from opsctl.parsers.ib_sysfs import IbSysfsDevice
from opsctl.parsers.ibstat import IbstatReport
from opsctl.parsers.nvidia_smi_q import NvidiaSmiQuery

# nvidia-smi "Clocks Event Reasons" names that mean hardware is slowing the GPU down.
_THERMAL_REASONS = ("HW Thermal Slowdown",)
_POWER_REASONS = ("HW Power Brake Slowdown",)


def _recovery(reset_required: bool | None, drain_and_reset: bool | None) -> str | None:
    """nvidia-smi's "GPU Reset Status" flags as NVML's recovery action names."""
    if drain_and_reset:
        return "drain_and_reset"
    if reset_required:
        return "reset"
    if reset_required is False and drain_and_reset is not True:
        return "none"
    return None


def gpus_from_nvidia_smi(report: NvidiaSmiQuery) -> list[GpuEvidence]:
    out: list[GpuEvidence] = []
    for g in report.gpus:
        reasons = g.clock_event_reasons
        out.append(
            GpuEvidence(
                index=g.minor_number if g.minor_number is not None else g.index,
                uuid=g.uuid,
                pci_bus_id=g.bus_id,
                model=g.product_name,
                ecc_dbe_volatile=g.ecc_volatile.uncorrectable,
                ecc_sbe_volatile=g.ecc_volatile.correctable,
                retired_pages_sbe=g.retired_pages_sbe,
                retired_pages_dbe=g.retired_pages_dbe,
                retired_pages_pending=g.retired_pages_pending,
                remap_uncorrectable=g.remapped_rows_uncorrectable,
                remap_pending=g.remapped_rows_pending,
                remap_failure=g.remapped_rows_failure,
                pcie_gen=g.pcie_gen_current,
                pcie_gen_max=g.pcie_gen_max,
                pcie_width=g.pcie_width_current,
                pcie_width_max=g.pcie_width_max,
                thermal_throttle=any(reasons.get(r, False) for r in _THERMAL_REASONS) if reasons else None,
                power_throttle=any(reasons.get(r, False) for r in _POWER_REASONS) if reasons else None,
                temperature_c=g.temperature_c,
                reset_required=g.reset_required,
                recovery_action=_recovery(g.reset_required, g.drain_and_reset_recommended),
                fabric_state=g.fabric_state or None,
                fabric_status=g.fabric_status or None,
            )
        )
    return out


def ib_from_sysfs(
    devices: list[IbSysfsDevice],
    previous: dict[str, dict[str, int]] | None = None,
    window_seconds: float | None = None,
) -> list[IbPortEvidence]:
    """Ports from sysfs; counter deltas against ``previous`` (``"dev/port" -> counters``) if given."""
    out: list[IbPortEvidence] = []
    for dev in devices:
        for p in dev.ports:
            key = f"{dev.name}/{p.number}"
            deltas: dict[str, int] | None = None
            if previous is not None and key in previous:
                before = previous[key]
                # A counter that went down was reset (driver reload, perfquery -R): count from zero.
                deltas = {
                    k: (v - before[k] if v >= before.get(k, 0) else v)
                    for k, v in p.counters.items()
                    if k in before
                }
            out.append(
                IbPortEvidence(
                    device=dev.name,
                    port=p.number,
                    state=p.state.upper() or None,
                    phys_state=p.phys_state or None,
                    rate_gbps=p.rate_gbps,
                    link_layer=p.link_layer or None,
                    counter_deltas=deltas,
                    window_seconds=window_seconds if deltas is not None else None,
                )
            )
    return out


def ib_from_ibstat(report: IbstatReport) -> list[IbPortEvidence]:
    return [
        IbPortEvidence(
            device=ca.name,
            port=p.number,
            state=p.state.upper() or None,
            phys_state=p.physical_state or None,
            rate_gbps=p.rate,
            link_layer=p.link_layer or None,
        )
        for ca in report.cas
        for p in ca.ports
    ]


def xids_from_dmesg(
    log: XidLog,
    gpus: list[GpuEvidence],
    boot_id: str = "",
    now: float | None = None,
    uptime: float | None = None,
) -> list[XidEvent]:
    """XID events with the GPU index resolved from the PCI address, and the wall time derived from
    the kernel's seconds-since-boot stamp when the node's current uptime is known."""
    by_pci = {normalise_pci(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
    return [
        XidEvent(
            xid=rec.code,
            gpu=by_pci.get(rec.pci),
            time=_wall(rec.uptime_seconds, now, uptime),
            boot_id=boot_id,
            message=rec.message[:200],
            mono=rec.uptime_seconds,
        )
        for rec in log.xids
    ]


def sxids_from_dmesg(
    log: XidLog, boot_id: str = "", now: float | None = None, uptime: float | None = None
) -> list[SxidEvent]:
    """NVSwitch SXid events, with the severity the kernel line states."""
    return [
        SxidEvent(
            sxid=rec.code,
            switch=rec.pci,
            fatal=rec.fatal,
            time=_wall(rec.uptime_seconds, now, uptime),
            boot_id=boot_id,
            message=rec.message[:200],
            mono=rec.uptime_seconds,
        )
        for rec in log.sxids
    ]


def _wall(stamp: float | None, now: float | None, uptime: float | None) -> float | None:
    """Wall time of a kernel stamp (seconds since boot), given the node's uptime at ``now``."""
    if now is None or uptime is None or stamp is None:
        return None
    return now - max(0.0, uptime - stamp)
