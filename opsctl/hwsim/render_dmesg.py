"""Kernel log lines for the simulated XID events, as the NVIDIA driver prints them.

``[ 2397166.983093] NVRM: Xid (PCI:0000:0f:00): 94, pid=2503421, name=python3, Ch 00000008`` with
the monotonic stamp (seconds since boot), or ``[Sun Feb 23 16:24:18 2025] ...`` for ``dmesg -T``.
"""

from __future__ import annotations

import time

from opsctl.hwsim.state import NodeHardware, XidEvent


def xid_line(
    state: NodeHardware, event: XidEvent, *, human_time: bool = False, kernel_boot: float | None = None
) -> str:
    """``kernel_boot``: the boot the stamps count from (default: the simulated node's)."""
    gpu = state.gpu(event.gpu)
    who = "pid='<unknown>', name=<unknown>" if event.pid is None else f"pid={event.pid}, name={event.process}"
    if human_time:
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(event.time))
    else:
        since_boot = max(0.0, event.time - (state.boot_time if kernel_boot is None else kernel_boot))
        stamp = f"{int(since_boot):5d}.{round((since_boot % 1) * 1e6) % 1000000:06d}"
    return f"[{stamp}] NVRM: Xid (PCI:{gpu.pci_short}): {event.xid}, {who}, {event.message}"


def render_dmesg(state: NodeHardware, *, human_time: bool = False, kernel_boot: float | None = None) -> str:
    """The kernel log's NVRM lines. ``kernel_boot`` is the boot time the monotonic stamps count
    from: on a machine whose real kernel answers /proc/uptime (the lab, an sshd test host) it must
    be that kernel's, because a reader turns stamps into wall time with that uptime."""
    boot = state.boot_time if kernel_boot is None else kernel_boot
    lines = [
        xid_line(state, e, human_time=human_time, kernel_boot=boot)
        for e in sorted(state.xids, key=lambda e: e.time)
    ]
    for g in state.gpus:
        if not g.present:
            # What the driver logs when a GPU disappears; stamped at the end of the log.
            last = max([e.time for e in state.xids] + [state.boot_time + 60.0])
            since = max(0.0, last - boot)
            stamp = (
                time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(last))
                if human_time
                else f"{int(since):5d}.{round((since % 1) * 1e6) % 1000000:06d}"
            )
            lines.append(f"[{stamp}] NVRM: GPU {g.bus_id[4:].lower()}: GPU has fallen off the bus.")
    return "".join(line + "\n" for line in lines)
