"""Parser for NVIDIA driver XID (and NVSwitch SXid) lines in the kernel log (``dmesg``,
``dmesg -T``, ``journalctl -k``).

Line shapes seen from real nodes::

    [2397166.983093] NVRM: Xid (PCI:0000:0f:00): 94, pid=2503421, name=python3, Ch 00000008
    [Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., Timeout ...
    [186965.348898] nvidia-nvswitch2: SXid (PCI:0000:85:00.0): 12028, Non-fatal, Link 61 ...
    [ 6612.123456] gpu-001 kernel: NVRM: Xid (PCI:0000:18:00): 79, ...   (journalctl -o short-monotonic)

The leading stamp is seconds since boot (plain ``dmesg``) or a local wall-clock time
(``dmesg -T``); both are kept as found, and neither is converted with a time zone guess.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_XID_RE = re.compile(
    r"(?:^|\s)(?P<kind>S?Xid) \((?P<pci>PCI:[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:, (?P<rest>.*))?$"
)
_UPTIME_RE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")
_WALL_RE = re.compile(r"^\[([A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_PID_RE = re.compile(r"pid=([^,]*)")
_NAME_RE = re.compile(r"name=([^,]*)")


@dataclass
class XidRecord:
    kind: str  # "Xid" (GPU) or "SXid" (NVSwitch)
    code: int
    pci: str  # normalised "0000:0f:00" (domain:bus:device), lower case
    uptime_seconds: float | None = None
    wall_time: str = ""  # as printed by dmesg -T
    pid: str = ""
    process: str = ""
    message: str = ""
    fatal: bool | None = None  # SXid lines say "Fatal" or "Non-fatal" after the code


@dataclass
class XidLog:
    xids: list[XidRecord] = field(default_factory=list)
    sxids: list[XidRecord] = field(default_factory=list)


def normalise_pci(pci: str) -> str:
    """``PCI:0000:9b:00`` / ``00000000:9B:00.0`` / ``0000:85:00.0`` -> ``0000:9b:00``."""
    text = pci.lower().removeprefix("pci:")
    parts = text.split(":")
    if len(parts) < 3:
        return text
    domain = parts[-3][-4:].rjust(4, "0")
    return f"{domain}:{parts[-2]}:{parts[-1].split('.')[0]}"


def parse_dmesg_xids(text: str) -> XidLog:
    log = XidLog()
    for line in text.splitlines():
        if "Xid" not in line:
            continue
        m = _XID_RE.search(line)
        if not m:
            continue
        rest = m.group("rest") or ""
        rec = XidRecord(kind=m.group("kind"), code=int(m.group("code")), pci=normalise_pci(m.group("pci")))
        um = _UPTIME_RE.match(line)
        if um:
            rec.uptime_seconds = float(um.group(1))
        wm = _WALL_RE.match(line)
        if wm:
            rec.wall_time = wm.group(1)
        pm, nm = _PID_RE.search(rest), _NAME_RE.search(rest)
        rec.pid = pm.group(1).strip("'") if pm else ""
        rec.process = nm.group(1) if nm else ""
        rec.message = rest
        severity = rest.split(",", 1)[0].strip().lower()
        if rec.kind == "SXid" and severity in ("fatal", "non-fatal", "nonfatal"):
            rec.fatal = severity == "fatal"
        (log.sxids if rec.kind == "SXid" else log.xids).append(rec)
    return log
