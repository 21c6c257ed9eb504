"""Kernel log lines for the simulated XID events, as the NVIDIA driver prints them.

``[ 2397166.983093] NVRM: Xid (PCI:0000:0f:00): 94, pid=2503421, name=python3, Ch 00000008`` with
the monotonic stamp (seconds since boot), or ``[Sun Feb 23 16:24:18 2025] ...`` for ``dmesg -T``.
"""

from __future__ import annotations

import time

from opsctl.hwsim.state import NodeHardware, XidEvent


def xid_line(state: NodeHardware, event: XidEvent, *, human_time: bool = False) -> str:
    gpu = state.gpu(event.gpu)
    who = "pid='<unknown>', name=<unknown>" if event.pid is None else f"pid={event.pid}, name={event.process}"
    if human_time:
        stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(event.time))
    else:
        since_boot = max(0.0, event.time - state.boot_time)
        stamp = f"{int(since_boot):5d}.{round((since_boot % 1) * 1e6) % 1000000:06d}"
    return f"[{stamp}] NVRM: Xid (PCI:{gpu.pci_short}): {event.xid}, {who}, {event.message}"


def render_dmesg(state: NodeHardware, *, human_time: bool = False) -> str:
    lines = [xid_line(state, e, human_time=human_time) for e in sorted(state.xids, key=lambda e: e.time)]
    for g in state.gpus:
        if not g.present:
            # What the driver logs when a GPU disappears; stamped at the end of the log.
            last = max([e.time for e in state.xids] + [state.boot_time + 60.0])
            since = last - state.boot_time
            stamp = (
                time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(last))
                if human_time
                else f"{int(since):5d}.{round((since % 1) * 1e6) % 1000000:06d}"
            )
            lines.append(f"[{stamp}] NVRM: GPU {g.bus_id[4:].lower()}: GPU has fallen off the bus.")
    return "".join(line + "\n" for line in lines)
