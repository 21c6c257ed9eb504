"""Parser for ``nvme list -o json`` (nvme-cli 1.x and the non-verbose 2.x list).

The document is ``{"Devices": [{"DevicePath": "/dev/nvme0n1", "ModelNumber": ..., "SerialNumber":
..., "Firmware": ..., "PhysicalSize": bytes, "UsedBytes": bytes, "SectorSize": 512, "MaximumLBA":
..., "Index": controller index, "NameSpace": nsid}, ...]}``; ``NameSpace`` is missing in old
releases. One entry per namespace, so a controller with two namespaces gives two entries with
the same serial. The verbose layout (``nvme list -v``, nested Subsystems/Controllers) is a
different format and is rejected rather than misread.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_CONTROLLER_RE = re.compile(r"^(nvme\d+)n\d+$")


@dataclass
class NvmeNamespace:
    path: str  # /dev/nvme0n1
    model: str = ""
    serial: str = ""
    firmware: str = ""
    namespace_id: int | None = None
    controller_index: int | None = None
    size_bytes: int | None = None  # PhysicalSize
    used_bytes: int | None = None
    sector_size: int | None = None

    @property
    def controller(self) -> str:
        """``nvme0`` for ``/dev/nvme0n1``."""
        base = self.path.rsplit("/", 1)[-1]
        m = _CONTROLLER_RE.match(base)
        return m.group(1) if m else base


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def parse_nvme_list_json(text: str) -> list[NvmeNamespace]:
    """Namespaces from ``nvme list -o json``; empty output means no NVMe; ValueError otherwise."""
    if not text.strip():
        return []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"nvme list: not JSON: {exc}") from exc
    devices = doc.get("Devices") if isinstance(doc, dict) else None
    if not isinstance(devices, list):
        raise ValueError("nvme list: no 'Devices' list")
    out: list[NvmeNamespace] = []
    for raw in devices:
        if not isinstance(raw, dict):
            continue
        if "Subsystems" in raw:
            raise ValueError("nvme list: verbose (-v) layout is not supported, run without -v")
        out.append(
            NvmeNamespace(
                path=str(raw.get("DevicePath", "")).strip(),
                model=str(raw.get("ModelNumber", "")).strip(),
                serial=str(raw.get("SerialNumber", "")).strip(),
                firmware=str(raw.get("Firmware", "")).strip(),
                namespace_id=_int(raw.get("NameSpace")),
                controller_index=_int(raw.get("Index")),
                size_bytes=_int(raw.get("PhysicalSize")),
                used_bytes=_int(raw.get("UsedBytes")),
                sector_size=_int(raw.get("SectorSize")),
            )
        )
    return out
