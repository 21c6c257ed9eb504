"""NVIDIA's XID catalogue as shipped data (``xid_catalogue.toml``): per XID its mnemonic, NVIDIA's
immediate-action bucket as published, and the opsctl action class that bucket maps to.

The file is checked when loaded: every class must be a known class, and a row with a published
bucket must carry exactly the class the bucket table maps it to, so a hand edit cannot make one row
disagree with the documented mapping.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from opsctl.checks.fixes import XID_CLASSES
from opsctl.errors import ConfigError

# XID 154 names the recovery action the driver now wants: "GPU recovery action changed from 0x0
# (None) to 0x2 (Node Reboot Required)". The catalogue lists the five labels it uses.
_XID154_TO = re.compile(r"to\s+0x[0-9a-fA-F]+\s*\(([^)]+)\)")
XID154_LABELS = {
    "none": "ignore",
    "drain p2p": "restart_app",
    "drain and reset": "reset_gpu",
    "gpu reset required": "reset_gpu",
    "node reboot required": "reboot",
}
XID_RECOVERY_CHANGED = 154
# The same actions by the names evidence carries them (NVML nvmlDeviceGpuRecoveryAction_t as DCGM
# field 1523 serves it, opsctl/evidence/prometheus.py RECOVERY_ACTIONS; nvidia-smi's "GPU Reset
# Status" flags, opsctl/evidence/convert.py), each with the class of the XID 154 label that names it:
# 0x0 None, 0x1 GPU Reset Required, 0x2 Node Reboot Required, 0x3 Drain P2P, 0x4 Drain and Reset.
# The gpu-recovery check judges the same table. An action not listed is fatal: reboot.
RECOVERY_CLASSES = {
    "none": "ignore",
    "reset": "reset_gpu",
    "gpu_reset": "reset_gpu",
    "drain_and_reset": "reset_gpu",
    "bus_reset": "reset_gpu",
    "reboot": "reboot",
    "node_reboot": "reboot",
    "system_reboot": "reboot",
    "drain_p2p": "restart_app",
}


@dataclass(frozen=True)
class XidEntry:
    xid: int
    name: str  # NVIDIA's mnemonic, e.g. ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
    nvidia_action: str  # the "Immediate Action" bucket as published ("" where none is)
    cls: str  # opsctl action class
    note: str  # NVIDIA's description, plus opsctl's reason where no bucket is published


@dataclass(frozen=True)
class XidCatalogue:
    source: dict[str, str]  # title, url, edition, retrieved
    buckets: dict[str, str]  # NVIDIA bucket -> opsctl class
    entries: dict[int, XidEntry]

    def get(self, xid: int) -> XidEntry | None:
        return self.entries.get(xid)


def parse_catalogue(data: dict[str, Any]) -> XidCatalogue:
    """Build and check a catalogue from the TOML document; any inconsistency is a ConfigError."""
    buckets = {str(k): str(v) for k, v in data.get("buckets", {}).items()}
    for bucket, cls in buckets.items():
        if cls not in XID_CLASSES:
            raise ConfigError(f"xid catalogue: bucket {bucket} maps to unknown class {cls!r}")
    entries: dict[int, XidEntry] = {}
    for key, row in data.get("xids", {}).items():
        if not str(key).isdigit() or not isinstance(row, dict):
            raise ConfigError(f"xid catalogue: bad row {key!r}")
        nvidia, cls = str(row.get("nvidia", "")), str(row.get("class", ""))
        if cls not in XID_CLASSES:
            raise ConfigError(f"xid catalogue: XID {key} has unknown class {cls!r}")
        if nvidia and buckets.get(nvidia) != cls:
            raise ConfigError(
                f"xid catalogue: XID {key} is {nvidia} but class {cls!r}; "
                f"the bucket table says {buckets.get(nvidia)!r}"
            )
        if not nvidia and not row.get("note"):
            raise ConfigError(f"xid catalogue: XID {key} has no published bucket and no reason")
        name, note = str(row.get("name", "")), str(row.get("note", ""))
        entries[int(key)] = XidEntry(int(key), name, nvidia, cls, note)
    return XidCatalogue({k: str(v) for k, v in data.get("catalogue", {}).items()}, buckets, entries)


@cache
def catalogue() -> XidCatalogue:
    text = resources.files("opsctl.checks").joinpath("xid_catalogue.toml").read_text(encoding="utf-8")
    return parse_catalogue(tomllib.loads(text))


def xid154_class(message: str) -> str | None:
    """The class XID 154's message asks for ("... to 0x2 (Node Reboot Required)"), if it names one."""
    m = _XID154_TO.search(message or "")
    if not m:
        return None
    return XID154_LABELS.get(m.group(1).strip().lower())


def recovery_class(action: str) -> str:
    """The class of the recovery action the driver asks for (an evidence name); unknown: reboot."""
    return RECOVERY_CLASSES.get(action.strip().lower(), "reboot")
