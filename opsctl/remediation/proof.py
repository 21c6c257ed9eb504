"""Proof that a latched fault is fixed: boot ids (the kernel's, or the boot time with its clock-step
margin), the driver's recovery action on the latched GPU, and what the latch asks for.

Pure: a latch and a node report in, a verdict out; ``opsctl.remediation.policy`` resumes on it.
"""

from __future__ import annotations

import re

from opsctl.checks.catalogue import required_action
from opsctl.checks.fixes import ACTION_RANK
from opsctl.checks.model import Verdict
from opsctl.checks.runner import NodeReport
from opsctl.evidence.model import BOOT_BTIME, BOOT_KERNEL
from opsctl.remediation.state import Latch

# recovery actions (NVML's, as evidence carries them) that ask for a reset or more
_RESET_ASKED = {"reset", "drain_and_reset"}


def gpu_index(latch: Latch, report: NodeReport) -> int | None:
    if latch.gpu_uuid:
        for index, uuid in report.gpu_uuids.items():
            if uuid == latch.gpu_uuid:
                return index
    return latch.gpu



# A boot time ("btime" boot id) that moved less than this since the drain is the same boot: a clock
# step (chrony's first sync after a bad RTC, a clock set by hand) moves /proc/stat btime with the
# wall clock. A new boot starts after the drain, so its btime is later by at least the old boot's
# uptime at the drain. The kernel's boot_id has no such limit: it changes at a boot and never else.
BTIME_REBOOT_SECONDS = 60.0
_BTIME_ID = re.compile(r"^boot-(\d+)$")


def boot_kind(boot_id: str, kind: str = "") -> str:
    """What ``boot_id`` is: ``kind`` where recorded, else told by its form (latches written before
    kinds were recorded): ``boot-<seconds>`` is the Prometheus source's boot time, any other id the
    kernel's boot_id (what the SSH source reads). "" without an id."""
    if not boot_id:
        return ""
    return kind or (BOOT_BTIME if _BTIME_ID.match(boot_id) else BOOT_KERNEL)


def _btime(boot_id: str) -> float | None:
    m = _BTIME_ID.match(boot_id)
    return float(m.group(1)) if m else None


def boot_changed(latch: Latch, report: NodeReport) -> tuple[bool | None, str]:
    """Whether the node booted since the latch was recorded, and why: True (proven), False (the
    same boot) or None (cannot prove a reboot either way). Boot ids of different kinds are never
    compared: a latch on the kernel's boot_id needs the kernel's boot_id now; a latch on the boot
    time needs a boot time now (from either kind of report) and reads a move under
    ``BTIME_REBOOT_SECONDS`` as a clock step."""
    kind = boot_kind(latch.boot_id, latch.boot_kind)
    if not kind or not (report.boot_id or report.boot_time is not None):
        return None, "the source gives no boot id to prove one"
    if kind == BOOT_KERNEL:
        if boot_kind(report.boot_id, report.boot_kind) != BOOT_KERNEL:
            return None, (
                "cannot prove a reboot: the drain recorded the kernel's boot id, this pass has none "
                "(only the boot time, which a clock step moves)"
            )
        if report.boot_id != latch.boot_id:
            return True, "the kernel's boot id changed"
        return False, "boot id unchanged since the drain"
    then = _btime(latch.boot_id) if kind == BOOT_BTIME else None
    now = report.boot_time
    if now is None and boot_kind(report.boot_id, report.boot_kind) == BOOT_BTIME:
        now = _btime(report.boot_id)
    if then is None or now is None:
        return None, f"cannot prove a reboot: the drain recorded a {kind} boot id, this pass has no boot time"
    moved = now - then
    if moved >= BTIME_REBOOT_SECONDS:
        return True, f"the boot time moved {moved:.0f} s later"
    return False, (
        f"boot id unchanged since the drain (the boot time moved {moved:+.0f} s: under "
        f"{BTIME_REBOOT_SECONDS:.0f} s is a clock step, not a reboot)"
    )


def observe(latch: Latch, report: NodeReport) -> None:
    """While latched: note when the driver asks for a reset (the proof needs a before and after),
    and raise the latch to reboot when the driver asks for one."""
    if boot_changed(latch, report)[0]:
        return  # another boot: what the driver says now is about the new boot
    index = gpu_index(latch, report)
    wanted = report.recovery.get(index) if index is not None else None
    if wanted in _RESET_ASKED:
        latch.reset_seen = True
    if wanted == "reboot" and ACTION_RANK[latch.action] < ACTION_RANK["reboot"]:
        latch.action = "reboot"


def resume_proof(latch: Latch, report: NodeReport) -> tuple[bool, str]:
    """Whether the fix the latch asks for is proven by this (clean) report, and why (not)."""
    if latch.escalated:
        return False, "escalated (a repeat fault): resume by hand after the repair"
    rebooted, boot = boot_changed(latch, report)
    if latch.action == "replace":
        return False, "the fault needs a replacement: resume by hand after the repair"
    if latch.action == "reboot":
        if rebooted:
            return True, f"rebooted since the drain ({boot})"
        return False, f"waiting for a reboot: {boot}"
    if latch.action == "reset_gpu":
        if rebooted:
            return True, f"rebooted since the drain (the GPU was reset; {boot})"
        index = gpu_index(latch, report)
        now = report.recovery.get(index) if index is not None else None
        if latch.reset_seen and now == "none":
            return True, f"GPU {index} was reset: the driver no longer asks for one"
        return False, "waiting for evidence of a GPU reset (or a reboot)"
    return True, "no proof needed"


def cleared_by_reset(v: Verdict, latch: Latch, report: NodeReport) -> bool:
    """An XID of the latched GPU that a reset fixes, once the reset is proven: the exporter's count
    (and the kernel log) keep it in the window after the reset, but the driver, which asks for a
    reset again on a new such fault, no longer asks. Everything else must clear by itself."""
    return (
        latch.action == "reset_gpu"
        and v.code == "gpu-xid"
        and required_action(v) in ("restart_app", "reset_gpu")
        and v.gpu is not None
        and v.gpu == gpu_index(latch, report)
        and resume_proof(latch, report)[0]
    )
