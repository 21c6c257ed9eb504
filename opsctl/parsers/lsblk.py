"""Parser for ``lsblk --json`` output (util-linux 2.33 to 2.39).

Two layouts are common and both are read:

- ``lsblk -J -b -p -o NAME,TYPE,SIZE,ROTA,SERIAL,MODEL,TRAN,MOUNTPOINT,FSTYPE`` (what ``hw_facts``
  runs): sizes in bytes as integers, names as ``/dev/...`` paths, a single ``mountpoint``;
- plain ``lsblk -J``: human sizes (``"7T"``, ``"63.8M"``, powers of 1024), bare kernel names and,
  since util-linux 2.37, a ``mountpoints`` list that holds ``null`` for "not mounted".

Older releases printed every value as a string (``"rota": "0"``); those are accepted too. A device
that belongs to several parents (the members of an md RAID) appears under each of them, as lsblk
prints it.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_SIZE_RE = re.compile(r"^\s*([\d.]+)\s*([BKMGTPE]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5, "E": 1024**6}


@dataclass
class BlockDevice:
    name: str  # kernel name, without /dev/
    path: str  # /dev/<name>
    type: str  # disk, part, lvm, raid0, loop, rom, ...
    size_bytes: int | None = None  # exact with -b, rounded from the human size otherwise
    size_exact: bool = False
    rotational: bool | None = None
    model: str = ""
    serial: str = ""
    transport: str = ""  # nvme, sata, usb, ... (only with -o TRAN)
    fstype: str = ""
    mountpoints: list[str] = field(default_factory=list)
    children: list[BlockDevice] = field(default_factory=list)

    @property
    def is_nvme(self) -> bool:
        return self.transport == "nvme" or self.name.startswith("nvme")


def parse_size(value: Any) -> tuple[int | None, bool]:
    """Bytes from an integer, a digit string or a human size; second item: whether it is exact."""
    if value is None or isinstance(value, bool):
        return None, False
    if isinstance(value, int):
        return value, True
    text = str(value).strip()
    if text.isdigit():
        return int(text), True
    m = _SIZE_RE.match(text)
    if not m:
        return None, False
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()]), False


def _str(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in ("1", 1):
        return True
    if value in ("0", 0):
        return False
    return None


def _device(raw: dict[str, Any]) -> BlockDevice:
    name = _str(raw.get("name"))
    kname = name[len("/dev/") :] if name.startswith("/dev/") else name
    path = _str(raw.get("path")) or (name if name.startswith("/dev/") else f"/dev/{name}")
    size, exact = parse_size(raw.get("size"))
    if "mountpoints" in raw and isinstance(raw["mountpoints"], list):
        mounts = [m for m in raw["mountpoints"] if m]
    else:
        mounts = [raw["mountpoint"]] if raw.get("mountpoint") else []
    return BlockDevice(
        name=kname,
        path=path,
        type=_str(raw.get("type")),
        size_bytes=size,
        size_exact=exact,
        rotational=_bool(raw.get("rota")),
        model=_str(raw.get("model")),
        serial=_str(raw.get("serial")),
        transport=_str(raw.get("tran")),
        fstype=_str(raw.get("fstype")),
        mountpoints=[str(m) for m in mounts],
        children=[_device(c) for c in raw.get("children") or [] if isinstance(c, dict)],
    )


def parse_lsblk_json(text: str) -> list[BlockDevice]:
    """The top-level devices of ``lsblk --json``, each with its children; ValueError if not lsblk JSON."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"lsblk: not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("blockdevices"), list):
        raise ValueError("lsblk: no 'blockdevices' list")
    return [_device(raw) for raw in doc["blockdevices"] if isinstance(raw, dict)]


def walk(devices: list[BlockDevice]) -> Iterator[BlockDevice]:
    """Every device, depth first (a RAID member's array appears once per member)."""
    for dev in devices:
        yield dev
        yield from walk(dev.children)


def nvme_disks(devices: list[BlockDevice]) -> list[BlockDevice]:
    """The NVMe namespaces (``type == disk``), in lsblk order."""
    return [d for d in devices if d.type == "disk" and d.is_nvme]


def mounts_of(device: BlockDevice) -> list[str]:
    """Every mount point on the device or anything built on it (partitions, LVM, md)."""
    seen: list[str] = []
    for dev in walk([device]):
        for m in dev.mountpoints:
            if m not in seen:
                seen.append(m)
    return seen
