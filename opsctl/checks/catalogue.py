"""The check catalogue: pure functions from one node's :class:`Evidence` to verdicts.

A check never does I/O. Each one names the fact it needs; when the source never provides that
fact the check is skipped, and when the source provides it for other nodes but not this one the
check answers UNKNOWN (missing data is never healthy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opsctl.checks.fixes import ACTION_CLASSES, ACTION_RANK, DRAIN_CLASSES
from opsctl.checks.model import Status, Verdict
from opsctl.checks.thresholds import Thresholds
from opsctl.checks.xid_catalogue import RECOVERY_CLASSES, XID_RECOVERY_CHANGED
from opsctl.evidence.model import Evidence, GpuEvidence, IbPortEvidence, XidEvent

CheckFn = Callable[[Evidence, Thresholds, float], list[Verdict]]

# What a FAIL of each check needs before the node may take work again (a step of the ladder in
# opsctl.checks.fixes); remediation latches on the verdict's evidence["action"], which a verdict may
# set itself (an XID's class, a failed row remap). A check not listed here needs UNLISTED_ACTION.
FAIL_ACTION: dict[str, str] = {
    "gpu-count": "reboot",  # a GPU missing from the driver's view comes back only with a reboot
    "gpu-xid": "reboot",  # each XID verdict sets its own class; reboot if one ever does not
    "gpu-ecc-dbe": "reset_gpu",  # volatile DBE count clears, and the row is remapped, on reset
    "gpu-retired-pages": "replace",  # page-retirement thresholds are NVIDIA's RMA criteria
    "gpu-row-remap": "reset_gpu",  # pending remap applies on reset; a failed remap sets replace
    "gpu-nvlink": "reset_gpu",
    "gpu-ecc-sbe-rate": "none",  # WARN only
    "gpu-nvlink-crc": "none",  # WARN only
    "gpu-pcie": "reboot",  # link retraining needs at least a reboot (often a reseat)
    "gpu-throttle": "restart_app",  # cooling fault: no proof beyond clean passes
    "gpu-recovery": "reset_gpu",  # the verdict carries the driver's own action
    "gpu-fabric": "reboot",  # fabric manager / NVSwitch registration
    "nvswitch-sxid": "reboot",
    "ib-port": "none",
    "ib-errors": "none",
    "mount": "none",
    "slurmd": "none",
    "lustre": "none",  # a file system or fabric fault, not the node's: resumed after clean passes
    "dcgm-health": "reset_gpu",
    "probe-hung": "none",  # judged by the policy; a hung nvidia-smi sets reboot in its verdict
    # judged by the policy: a required family lost on one node for [health] unknown_fail_after; its
    # verdict sets reboot (a new boot with full, clean evidence resumes it), never fatal-class
    "evidence-lost": "reboot",
}
# A FAIL of a check this table does not list: a fault nothing here knows how to prove fixed.
UNLISTED_ACTION = "reboot"
_CLASS_RANK = {c: i for i, c in enumerate(ACTION_CLASSES)}


def fail_action(code: str) -> str:
    """What a FAIL of check ``code`` needs (``UNLISTED_ACTION`` for a check not in FAIL_ACTION)."""
    return FAIL_ACTION.get(code, UNLISTED_ACTION)


def required_action(v: Verdict) -> str:
    """What a failing verdict's fault needs: the action its evidence names, where that is a step of
    the ladder, else its check's."""
    action = v.evidence.get("action")
    if isinstance(action, str) and action in ACTION_RANK:
        return action
    return fail_action(v.code)


def worse_action(a: str, b: str) -> str:
    """The stronger of two action classes (none < ignore < restart_app < ... < replace)."""
    return a if _CLASS_RANK.get(a, len(_CLASS_RANK)) >= _CLASS_RANK.get(b, len(_CLASS_RANK)) else b


@dataclass(frozen=True)
class Check:
    code: str
    fact: str
    title: str
    fn: CheckFn


def _v(
    ev: Evidence, code: str, status: Status, summary: str, gpu: int | None = None, **evidence: object
) -> Verdict:
    evidence.setdefault("source", ev.source)
    if status is Status.FAIL:
        evidence.setdefault("action", fail_action(code))
    return Verdict(code=code, status=status, node=ev.node, gpu=gpu, summary=summary, evidence=dict(evidence))


def _unknown(ev: Evidence, code: str, what: str, gpu: int | None = None) -> Verdict:
    return _v(ev, code, Status.UNKNOWN, f"{what} not reported", gpu, short="no data")


def check_gpu_count(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    expected = th.get("gpu", "expected_per_node")
    if ev.gpu_count is None:
        return [_unknown(ev, "gpu-count", "GPU count")]
    if ev.gpu_count < expected:
        return [
            _v(
                ev,
                "gpu-count",
                Status.FAIL,
                f"{ev.gpu_count} of {expected} GPUs visible",
                short=f"{ev.gpu_count}/{expected} gpus",
                seen=ev.gpu_count,
                expected=expected,
            )
        ]
    return [_v(ev, "gpu-count", Status.OK, f"{ev.gpu_count} GPUs", seen=ev.gpu_count, expected=expected)]


# The classes an XID keeps the last-XID gauge at until its fix: a reboot reloads the driver (the gauge
# starts at 0 again), a replacement comes with one. A GPU reset's (reset_gpu) may leave the gauge.
GAUGE_CLASSES = frozenset({"reboot", "replace"})
_XID_MODES = {
    "kernel-log": "kernel log",
    "count": "XID counts over the exporter's window",
    "last-value": "last XID per GPU only",
}


def _history(ev: Evidence, boot_id: str, when: float | None, now: float, window: float) -> bool:
    """An event of an earlier boot, before the current boot started, or older than the window."""
    if ev.boot_id and boot_id and boot_id != ev.boot_id:
        return True
    if when is not None and ev.boot_time is not None and when < ev.boot_time:
        return True
    return when is not None and now - when > window


def _unplaced(ev: Evidence, e: XidEvent) -> bool:
    """A counted XID the node's latest data no longer counts, on a node whose boot is unknown: it
    may be of this boot (counted earlier, then out of the exporter's window) or of one before a
    reboot. One still counted now is of this boot: the exporter's counts restart with the node."""
    return e.counted_now is False and ev.boot_time is None and not (ev.boot_id and e.boot_id)


def _xid_class(th: Thresholds, e: XidEvent) -> str:
    return th.xid_class_basis(e.xid, e.message, e.recovery_action)[0]


def check_xid(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if ev.xids is None:
        return [_unknown(ev, "gpu-xid", "XID events")]
    window = float(th.get("xid", "window_seconds"))
    mode = ev.xid_mode
    last_value = mode == "last-value"
    how = _XID_MODES.get(mode, mode or "events")
    uuids = {g.index: g.uuid for g in ev.gpus if g.uuid}
    # One entry per (gpu, xid) within this boot and the window: counts summed, the worst class kept
    # (XID 154 takes the action its message names, so two 154s may differ).
    current: dict[tuple[int | None, int], dict[str, Any]] = {}
    # 0: the last-XID gauge at rest
    events = [
        e
        for e in ev.xids
        if e.xid > 0
        and not _history(ev, e.boot_id, e.time, now, window)
        # a last-XID gauge's XID no count shows: only a class the gauge keeps until its fix
        and not (e.uncounted and _xid_class(th, e) not in GAUGE_CLASSES)
    ]
    placed = {(e.gpu, e.xid) for e in events if not _unplaced(ev, e)}
    for e in events:
        unplaced = _unplaced(ev, e)
        if unplaced and (e.gpu, e.xid) in placed:
            continue  # this boot's own count of it decides
        entry = current.setdefault(
            (e.gpu, e.xid),
            {"count": 0, "last": None, "cls": "ignore", "unplaced": unplaced, "basis": None,
             "gauge": e.uncounted},
        )
        entry["count"] += e.count
        cls, basis = th.xid_class_basis(e.xid, e.message, e.recovery_action)
        if entry["basis"] is None or worse_action(cls, entry["cls"]) != entry["cls"]:
            entry["cls"], entry["basis"] = cls, (basis, e.recovery_action, e.recovery_from)
        if e.time is not None and (entry["last"] is None or e.time > entry["last"]):
            entry["last"] = e.time
    verdicts: list[Verdict] = []
    for (gpu, xid), entry in sorted(current.items(), key=lambda kv: (kv[0][0] or -1, kv[0][1])):
        cls = entry["cls"]
        catalogued = th.xid_entry(xid)
        name = catalogued.name if catalogued else "not in NVIDIA's catalogue"
        where = f" on gpu {gpu}" if gpu is not None else ""
        basis, recovery, recovery_from = entry["basis"]
        why = _class_why(xid, basis, recovery, recovery_from, gpu)
        if cls in DRAIN_CLASSES:
            # neither drained on nor taken as healthy: the remediation policy holds on UNKNOWN
            status = Status.UNKNOWN if entry["unplaced"] else Status.FAIL
        elif last_value:
            # Only the last XID is known: a harmless one may hide an earlier fatal one.
            status = Status.UNKNOWN
        elif cls == "ignore":
            continue
        else:
            status = Status.WARN
        summary = f"xid {xid} {name} ({cls}{why}){where}, {entry['count']}x [{how}]"
        if status is Status.UNKNOWN and entry["unplaced"]:
            last = entry["last"]
            ago = f"{(now - last) / 60:.0f} min ago" if last is not None else "at an unknown time"
            summary = (
                f"xid {xid} {name} ({cls}{why}){where}, {entry['count']}x, last counted {ago};"
                f" boot time unknown, cannot tell whether it predates a reboot [{how}]"
            )
        elif status is Status.UNKNOWN:
            summary = f"last xid {xid} {name} ({cls}{why}){where}: an earlier fatal XID may be hidden [{how}]"
        elif entry["gauge"]:
            summary = (
                f"xid {xid} {name} ({cls}{why}){where}: the last-XID gauge shows it, no count in the window"
                f" does (raised while no scrape stored the exporter's count) [{how}]"
            )
        # what gave the class: the site's table, NVIDIA's catalogue, XID 154's message or the
        # driver's recovery action (the series and value it was read from)
        detail: dict[str, object] = {"class_from": basis}
        if basis == "recovery_action":
            detail |= {"recovery": recovery, "recovery_from": recovery_from}
        verdicts.append(
            _v(
                ev,
                "gpu-xid",
                status,
                summary,
                gpu,
                short=f"xid {xid} gpu {gpu}" if gpu is not None else f"xid {xid}",
                action=cls,
                xid=xid,
                name=name,
                nvidia_action=catalogued.nvidia_action if catalogued else "",
                count=entry["count"],
                last=entry["last"],
                uuid=uuids.get(gpu, "") if gpu is not None else "",
                mode=mode,
                **detail,
            )
        )
    return verdicts or [_v(ev, "gpu-xid", Status.OK, f"no actionable XID in window [{how}]", mode=mode)]


def _class_why(xid: int, basis: str, recovery: str | None, recovery_from: str, gpu: int | None) -> str:
    """For XID 154, whose class is the action the driver names: where that action came from."""
    if xid != XID_RECOVERY_CHANGED:
        return ""
    if basis == "message":
        return ", as its message names"
    if basis == "recovery_action":
        return f", as the driver's recovery action says: {recovery_from} ({recovery})"
    if basis == "site":
        return ": the site's class"
    on = f"gpu {gpu}" if gpu is not None else "its GPU"
    return f": the catalogue's class; no message names the action and no recovery action is served for {on}"


def _per_gpu(
    ev: Evidence,
    code: str,
    what: str,
    judge: Callable[[GpuEvidence], tuple[Status, str, dict[str, object]] | None],
) -> list[Verdict]:
    verdicts: list[Verdict] = []
    unknown: list[int] = []
    for g in ev.gpus:
        result = judge(g)
        if result is None:
            unknown.append(g.index)
            continue
        status, summary, detail = result
        if status is not Status.OK:
            verdicts.append(_v(ev, code, status, f"gpu {g.index}: {summary}", g.index, **detail))
    if unknown:
        verdicts.append(
            _v(ev, code, Status.UNKNOWN, f"{what} not reported for gpus {unknown}", short="no data")
        )
    if not ev.gpus:
        verdicts.append(_unknown(ev, code, what))
    return verdicts or [_v(ev, code, Status.OK, f"{what}: ok on {len(ev.gpus)} GPUs")]


def check_ecc_dbe(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    limit = th.get("ecc", "dbe_volatile_max")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.ecc_dbe_volatile is None:
            return None
        if g.ecc_dbe_volatile > limit:
            return (
                Status.FAIL,
                f"{g.ecc_dbe_volatile} uncorrectable ECC errors",
                {"short": f"ecc dbe {g.ecc_dbe_volatile} gpu {g.index}", "dbe": g.ecc_dbe_volatile},
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-ecc-dbe", "uncorrectable ECC", judge)


def check_ecc_sbe_rate(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    limit = th.get("ecc", "sbe_per_hour_warn")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.ecc_sbe_per_hour is None:
            return None
        if g.ecc_sbe_per_hour > limit:
            return (
                Status.WARN,
                f"{g.ecc_sbe_per_hour:.0f} correctable ECC errors/hour",
                {
                    "short": f"ecc sbe {g.ecc_sbe_per_hour:.0f}/h gpu {g.index}",
                    "per_hour": g.ecc_sbe_per_hour,
                },
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-ecc-sbe-rate", "correctable ECC rate", judge)


def check_retired_pages(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    dbe_max, total_fail = th.get("retired_pages", "dbe_max"), th.get("retired_pages", "total_fail")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.retired_pages_dbe is None and g.retired_pages_pending is None:
            # Ampere and later report row remapping instead ("Retired Pages: N/A"): not applicable
            if g.remap_failure is not None or g.remap_pending is not None:
                return Status.OK, "", {}
            return None
        dbe, sbe = g.retired_pages_dbe or 0, g.retired_pages_sbe or 0
        detail: dict[str, object] = {"dbe": dbe, "sbe": sbe, "pending": g.retired_pages_pending}
        if dbe > dbe_max or dbe + sbe >= total_fail:
            return (
                Status.FAIL,
                f"{dbe + sbe} retired pages ({dbe} DBE)",
                {**detail, "short": f"retired pages {dbe + sbe} gpu {g.index}"},
            )
        if g.retired_pages_pending:
            return Status.WARN, "page retirement pending a GPU reset", {**detail, "short": "retire pending"}
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-retired-pages", "retired pages", judge)


def check_row_remap(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    on_pending, on_failure = th.get("row_remap", "fail_on_pending"), th.get("row_remap", "fail_on_failure")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.remap_failure is None and g.remap_pending is None:
            return None
        if g.remap_failure:
            status = Status.FAIL if on_failure else Status.WARN
            return (
                status,
                "row remapping failed",
                {"short": f"row remap failed gpu {g.index}", "failure": True, "action": "replace"},
            )
        if g.remap_pending:
            status = Status.FAIL if on_pending else Status.WARN
            return (
                status,
                "row remap pending (needs GPU reset)",
                {"short": f"row remap pending gpu {g.index}", "pending": True},
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-row-remap", "row remapping", judge)


def check_nvlink(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    limit = th.get("nvlink", "links_down_max")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.nvlink_links_down is None:
            return None
        if g.nvlink_links_down > limit:
            return (
                Status.FAIL,
                f"{g.nvlink_links_down} NVLink links down",
                {
                    "short": f"nvlink {g.nvlink_links_down} down gpu {g.index}",
                    "down": g.nvlink_links_down,
                    "total": g.nvlink_links_total,
                },
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-nvlink", "NVLink state", judge)


def check_nvlink_crc(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    limit = th.get("nvlink", "crc_per_second_warn")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.nvlink_crc_per_second is None:
            return None
        if g.nvlink_crc_per_second > limit:
            return (
                Status.WARN,
                f"NVLink CRC errors {g.nvlink_crc_per_second:.1f}/s",
                {"short": f"nvlink crc gpu {g.index}", "per_second": g.nvlink_crc_per_second},
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-nvlink-crc", "NVLink CRC rate", judge)


def check_pcie(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    min_gen, min_width = th.get("pcie", "min_gen"), th.get("pcie", "min_width")

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.pcie_gen is None or g.pcie_width is None:
            return None
        if g.pcie_gen < min_gen or g.pcie_width < min_width:
            return (
                Status.FAIL,
                f"PCIe Gen{g.pcie_gen} x{g.pcie_width} (want Gen{min_gen} x{min_width})",
                {
                    "short": f"pcie gen{g.pcie_gen} x{g.pcie_width} gpu {g.index}",
                    "gen": g.pcie_gen,
                    "width": g.pcie_width,
                },
            )
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-pcie", "PCIe link", judge)


def check_throttle(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    on_thermal = Status(th.get("throttle", "thermal"))
    on_brake = Status(th.get("throttle", "power_brake"))

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.thermal_throttle is None and g.power_throttle is None:
            return None
        if g.thermal_throttle and on_thermal is not Status.OK:
            return (
                on_thermal,
                "hardware thermal slowdown",
                {"short": f"thermal slowdown gpu {g.index}", "temperature_c": g.temperature_c},
            )
        if g.power_throttle and on_brake is not Status.OK:
            return on_brake, "hardware power brake", {"short": f"power brake gpu {g.index}"}
        return Status.OK, "", {}

    return _per_gpu(ev, "gpu-throttle", "throttling", judge)


def _fabric_ports(ev: Evidence, th: Thresholds) -> list[IbPortEvidence]:
    wanted = th.get("ib", "devices")
    ports = ev.ib_ports or []
    if wanted:
        return [p for p in ports if p.device in wanted]
    return [p for p in ports if (p.link_layer or "InfiniBand") == "InfiniBand"]


def check_ib_ports(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if ev.ib_ports is None:
        return [_unknown(ev, "ib-port", "InfiniBand ports")]
    want_rate, want_layer = float(th.get("ib", "expected_rate_gbps")), th.get("ib", "link_layer")
    wanted = th.get("ib", "devices")
    ports = _fabric_ports(ev, th)
    verdicts: list[Verdict] = []
    present = {p.device for p in ports}
    for dev in wanted:
        if dev not in present:
            verdicts.append(
                _v(ev, "ib-port", Status.FAIL, f"{dev} missing", short=f"{dev} missing", device=dev)
            )
    for p in ports:
        name = f"{p.device}/{p.port}"
        problems: list[str] = []
        if p.state is None or p.phys_state is None or p.rate_gbps is None:
            verdicts.append(_v(ev, "ib-port", Status.UNKNOWN, f"{name}: state not reported", short="no data"))
            continue
        if p.state.upper() != "ACTIVE":
            problems.append(f"state {p.state}")
        if p.phys_state.lower() != "linkup":
            problems.append(f"phys {p.phys_state}")
        if p.rate_gbps < want_rate:
            problems.append(f"rate {p.rate_gbps:g} < {want_rate:g}")
        if wanted and p.link_layer is not None and p.link_layer != want_layer:
            problems.append(f"link layer {p.link_layer}")
        if problems:
            verdicts.append(
                _v(
                    ev,
                    "ib-port",
                    Status.FAIL,
                    f"{name}: {', '.join(problems)}",
                    short=f"{p.device} {problems[0]}",
                    device=p.device,
                    port=p.port,
                    state=p.state,
                    phys_state=p.phys_state,
                    rate_gbps=p.rate_gbps,
                    link_layer=p.link_layer,
                )
            )
    if not ports and not wanted:
        verdicts.append(_v(ev, "ib-port", Status.FAIL, "no InfiniBand port found", short="no ib ports"))
    return verdicts or [_v(ev, "ib-port", Status.OK, f"{len(ports)} ports active at {want_rate:g} Gb/s")]


def _link_down(p: IbPortEvidence) -> bool:
    return (p.state or "").upper() not in ("", "ACTIVE") or (p.phys_state or "").lower() not in ("", "linkup")


def check_ib_errors(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if ev.ib_ports is None:
        return [_unknown(ev, "ib-errors", "InfiniBand error counters")]
    fail_at: dict[str, int] = th.get("ib", "counters_fail")
    warn_at: dict[str, int] = th.get("ib", "counters_warn")
    verdicts: list[Verdict] = []
    for p in _fabric_ports(ev, th):
        if _link_down(p):
            continue  # one cause, one check: ib-port FAILs it; its link_downed says only how it fell
        if p.counter_deltas is None:
            verdicts.append(
                _v(
                    ev,
                    "ib-errors",
                    Status.UNKNOWN,
                    f"{p.device}/{p.port}: no counter deltas",
                    short="no data",
                )
            )
            continue
        for levels, status in ((fail_at, Status.FAIL), (warn_at, Status.WARN)):
            hits = {
                k: p.counter_deltas.get(k, 0)
                for k, lim in levels.items()
                if lim and p.counter_deltas.get(k, 0) >= lim
            }
            if hits:
                first = next(iter(hits))
                verdicts.append(
                    _v(
                        ev,
                        "ib-errors",
                        status,
                        f"{p.device}/{p.port}: " + ", ".join(f"+{v} {k}" for k, v in hits.items()),
                        short=f"{p.device} +{hits[first]} {first}",
                        device=p.device,
                        port=p.port,
                        increase=hits,
                        window_seconds=p.window_seconds,
                    )
                )
                break
    return verdicts or [_v(ev, "ib-errors", Status.OK, "no InfiniBand error counter over threshold")]


def check_mounts(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    required: list[dict[str, str]] = th.get("mounts", "required")
    if not required:
        return []
    if ev.mounts is None:
        return [_unknown(ev, "mount", "mounts")]
    seen = {m.path: m for m in ev.mounts}
    verdicts: list[Verdict] = []
    for req in required:
        m = seen.get(req["path"])
        if m is None or m.present is False:
            verdicts.append(
                _v(ev, "mount", Status.FAIL, f"{req['path']} not mounted", short=f"{req['path']} missing")
            )
        elif m.responsive is None:
            verdicts.append(
                _v(ev, "mount", Status.UNKNOWN, f"{req['path']}: responsiveness unknown", short="no data")
            )
        elif not m.responsive:
            verdicts.append(
                _v(
                    ev,
                    "mount",
                    Status.FAIL,
                    f"{req['path']} not responding: {m.detail}",
                    short=f"{req['path']} hung",
                    detail=m.detail,
                )
            )
    return verdicts or [_v(ev, "mount", Status.OK, f"{len(required)} mounts present and responsive")]


def check_slurmd(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if not th.get("slurmd", "required"):
        return []
    if ev.slurmd_alive is None:
        return [_unknown(ev, "slurmd", "slurmd liveness")]
    if not ev.slurmd_alive:
        return [_v(ev, "slurmd", Status.FAIL, "slurmd not running", short="slurmd down")]
    return [_v(ev, "slurmd", Status.OK, "slurmd running")]


def check_lustre(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    """Only where the source runs the probe ([health] lustre_mount): elsewhere the fact is not
    provided and the check does not apply. A step that timed out is UNKNOWN here; the policy turns
    a probe that keeps timing out into probe-hung."""
    lu = ev.lustre
    if lu is None:
        return [_unknown(ev, "lustre", "Lustre probe")]
    if not lu.mounted or lu.problems:
        return [
            _v(
                ev,
                "lustre",
                Status.FAIL,
                f"{lu.mount}: " + "; ".join(lu.problems),
                short=f"{lu.mount} " + ("not mounted" if not lu.mounted else "probe failed"),
                mount=lu.mount,
                problems=list(lu.problems),
                timed_out=list(lu.timed_out),
            )
        ]
    if lu.timed_out:
        return [
            _v(
                ev,
                "lustre",
                Status.UNKNOWN,
                f"{lu.mount}: timed out: {', '.join(lu.timed_out)}",
                short=f"{lu.mount} probe timed out",
                mount=lu.mount,
                timed_out=list(lu.timed_out),
            )
        ]
    write = (
        f", wrote {lu.write_bytes >> 20} MiB in {lu.write_seconds:.2f} s"
        if lu.write_seconds is not None
        else ""
    )
    return [
        _v(
            ev,
            "lustre",
            Status.OK,
            f"{lu.mount}: {lu.nids_pinged} NIDs answer lctl ping, {lu.servers_active} targets active{write}",
            mount=lu.mount,
            write_seconds=lu.write_seconds,
        )
    ]


def check_dcgm(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if ev.dcgm_incidents is None:
        return [_unknown(ev, "dcgm-health", "DCGM health")]
    verdicts: list[Verdict] = []
    for inc in ev.dcgm_incidents:
        status = {
            "failure": Status.FAIL,
            "fail": Status.FAIL,
            "warning": Status.WARN,
            "warn": Status.WARN,
        }.get(str(inc.get("status", "")).lower())
        if status is None:
            continue
        gpu = inc.get("gpu")
        verdicts.append(
            _v(
                ev,
                "dcgm-health",
                status,
                f"gpu {gpu}: {inc.get('system', '')}: {inc.get('message', '')}"[:200],
                gpu,
                short=f"dcgm {(str(inc.get('system', '')).split() or ['?'])[0].lower()} gpu {gpu}",
                system=inc.get("system", ""),
                dcgm_status=inc.get("status", ""),
                message=inc.get("message", ""),
            )
        )
    return verdicts or [_v(ev, "dcgm-health", Status.OK, "DCGM reports healthy")]


# NVML's recovery actions (nvmlDeviceGetGpuRecoveryAction; DCGM field 1523), by the names the sources
# use, with NVIDIA's "Recovery action flag" guidance (GPU memory error management, "Error Recovery
# and Response Flags"). DRAIN_P2P: "terminate all GPU processes that conduct peer-to-peer traffic ...
# then query again, which will return one of the other actions": the node must stop taking work
# (FAIL), but nothing is to be proven afterwards, the driver's next answer is judged on its own.
# One table with XID 154's class when the recovery action stands in for its message
# (xid_catalogue.RECOVERY_CLASSES): "none" asks for nothing.
_RECOVERY: dict[str, str | None] = {
    name: (None if cls == "ignore" else cls) for name, cls in RECOVERY_CLASSES.items()
}


def check_recovery(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        wanted = g.recovery_action
        if wanted is None and g.reset_required is None:
            return None
        if g.reset_required and wanted in (None, "none"):
            wanted = "reset"
        wanted = (wanted or "none").lower()
        if wanted not in _RECOVERY:
            # the driver asks for something this table does not know: treat it as fatal
            return (
                Status.FAIL,
                f"driver asks for unknown recovery action {wanted!r}",
                {
                    "short": f"recovery {wanted} gpu {g.index}"[:60],
                    "recovery": wanted,
                    "action": "reboot",
                    "uuid": g.uuid,
                },
            )
        action = _RECOVERY[wanted]
        if action is None:
            return Status.OK, "", {}
        return (
            Status.FAIL,
            f"driver says the GPU needs: {wanted}",
            {
                "short": f"needs {wanted} gpu {g.index}",
                "recovery": wanted,
                "action": action,
                "uuid": g.uuid,
            },
        )

    return _per_gpu(ev, "gpu-recovery", "GPU recovery action", judge)


def check_fabric(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    settle = float(th.get("fabric", "settle_seconds"))
    booted_long_ago = ev.boot_time is not None and now - ev.boot_time > settle

    def judge(g: GpuEvidence) -> tuple[Status, str, dict[str, object]] | None:
        if g.fabric_state is None:
            return None
        state, status = g.fabric_state.strip(), (g.fabric_status or "").strip()
        detail: dict[str, object] = {"fabric_state": state, "fabric_status": status, "uuid": g.uuid}
        if state.lower() in ("not supported", "n/a"):
            return Status.OK, "", {}  # no NVSwitch fabric on this system: nothing to register
        if state.lower() == "completed":
            if status.lower() == "success":
                return Status.OK, "", {}
            return (
                Status.FAIL,
                f"NVLink fabric registration failed: {status or 'no status'}",
                {**detail, "short": f"fabric {status or 'failed'} gpu {g.index}"[:60]},
            )
        if state.lower() in ("in progress", "not started") and not booted_long_ago:
            # the fabric manager registers GPUs after boot; give it settle_seconds
            return (
                Status.UNKNOWN,
                f"NVLink fabric {state.lower()} (boot too recent or boot time unknown)",
                {**detail, "short": "fabric pending"},
            )
        return (
            Status.FAIL,
            f"NVLink fabric {state.lower()}{f' ({status})' if status and status != 'N/A' else ''}",
            {**detail, "short": f"fabric {state.lower()} gpu {g.index}"[:60]},
        )

    return _per_gpu(ev, "gpu-fabric", "NVLink fabric state", judge)


def check_sxid(ev: Evidence, th: Thresholds, now: float) -> list[Verdict]:
    if ev.sxids is None:
        return [_unknown(ev, "nvswitch-sxid", "NVSwitch SXid events")]
    window = float(th.get("xid", "window_seconds"))
    always_fatal = set(th.get("sxid", "always_fatal"))
    current: dict[tuple[str, int], dict[str, Any]] = {}
    for e in ev.sxids:
        if _history(ev, e.boot_id, e.time, now, window):
            continue
        entry = current.setdefault(
            (e.switch, e.sxid), {"count": 0, "last": None, "fatal": False, "said": set()}
        )
        entry["count"] += e.count
        # the kernel line's own word first; a missing word counts as fatal (unknown is fatal)
        entry["fatal"] |= e.fatal is not False or e.sxid in always_fatal
        entry["said"].add("unstated" if e.fatal is None else ("fatal" if e.fatal else "non-fatal"))
        if e.time is not None and (entry["last"] is None or e.time > entry["last"]):
            entry["last"] = e.time
    verdicts: list[Verdict] = []
    for (switch, sxid), entry in sorted(current.items()):
        fatal = entry["fatal"]
        verdicts.append(
            _v(
                ev,
                "nvswitch-sxid",
                Status.FAIL if fatal else Status.WARN,
                f"NVSwitch {switch}: SXid {sxid} ({'fatal' if fatal else 'non-fatal'}), {entry['count']}x",
                short=f"sxid {sxid} {switch}",
                sxid=sxid,
                switch=switch,
                fatal=fatal,
                kernel_said=sorted(entry["said"]),
                count=entry["count"],
                last=entry["last"],
            )
        )
    return verdicts or [_v(ev, "nvswitch-sxid", Status.OK, "no NVSwitch SXid in window")]


CATALOGUE: tuple[Check, ...] = (
    Check("gpu-count", "gpu_count", "GPU count against the inventory", check_gpu_count),
    Check("gpu-xid", "xid", "XID events, classified by NVIDIA's XID catalogue", check_xid),
    Check("gpu-ecc-dbe", "ecc", "uncorrectable (double-bit) ECC errors", check_ecc_dbe),
    Check("gpu-ecc-sbe-rate", "ecc_sbe_rate", "correctable (single-bit) ECC error rate", check_ecc_sbe_rate),
    Check("gpu-retired-pages", "retired_pages", "retired memory pages", check_retired_pages),
    Check("gpu-row-remap", "row_remap", "row remapping pending or failed", check_row_remap),
    Check("gpu-nvlink", "nvlink", "NVLink link state", check_nvlink),
    Check("gpu-nvlink-crc", "nvlink_crc", "NVLink CRC error rate", check_nvlink_crc),
    Check("gpu-pcie", "pcie", "PCIe link generation and width", check_pcie),
    Check("gpu-throttle", "throttle", "hardware thermal and power throttling", check_throttle),
    Check("ib-port", "ib", "InfiniBand port state, physical state, rate, link layer", check_ib_ports),
    Check("ib-errors", "ib_errors", "InfiniBand error counter increases", check_ib_errors),
    Check("mount", "mounts", "required mounts present and responsive", check_mounts),
    Check("slurmd", "slurmd", "slurmd alive", check_slurmd),
    Check("lustre", "lustre", "Lustre client: lctl ping, lfs check servers, a timed write", check_lustre),
    Check("dcgm-health", "dcgm", "DCGM health watches and diagnostics", check_dcgm),
    Check("gpu-recovery", "recovery", "the recovery action the driver asks for", check_recovery),
    Check("gpu-fabric", "fabric", "NVLink fabric registration (fabric manager)", check_fabric),
    Check("nvswitch-sxid", "sxid", "NVSwitch SXid events, fatal or not", check_sxid),
)
# evidence: a node that could not be read; probe-hung: a probe that kept timing out (policy adds it);
# evidence-lost: a required family one node lacked for unknown_fail_after (policy adds it);
# launch-node-failed: a node that failed under a run (the watcher's drains)
CODES = frozenset(c.code for c in CATALOGUE) | {
    "evidence", "probe-hung", "evidence-lost", "launch-node-failed"}
