"""Parser for the Linux InfiniBand sysfs tree (``/sys/class/infiniband/<dev>/...``).

The parser works on a mapping ``{relative path: file content}`` (for example
``"mlx5_0/ports/1/state": "4: ACTIVE"``), so it can be fed from a live tree
(:func:`read_ib_sysfs`), from files fetched over SSH, or from a flattened ``path=value`` dump
(:func:`parse_flattened`). Values are read as the kernel prints them:

- ``ports/N/state``: ``"4: ACTIVE"``; ``ports/N/phys_state``: ``"5: LinkUp"``
- ``ports/N/rate``: ``"400 Gb/sec (4X NDR)"``
- ``ports/N/counters/*``: the PMA counters (``symbol_error``, ``link_downed``, ``port_rcv_errors``,
  ...); ``port_xmit_data``/``port_rcv_data`` count 4-byte words, not bytes
- ``ports/N/hw_counters/*``: driver counters (mlx5: ``out_of_buffer``, ``roce_adp_retrans``, ...)

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_ROOT = "/sys/class/infiniband"
_RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec\s*(?:\(([^)]*)\))?")
_CODE_RE = re.compile(r"^\s*(\d+)\s*:\s*(.*)$")


@dataclass
class IbSysfsPort:
    number: int
    state: str = ""  # ACTIVE, DOWN, INIT, ARMED
    state_code: int | None = None
    phys_state: str = ""  # LinkUp, Disabled, Polling, ...
    phys_state_code: int | None = None
    rate_gbps: float | None = None
    rate_detail: str = ""  # "4X NDR"
    link_layer: str = ""
    lid: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


@dataclass
class IbSysfsDevice:
    name: str
    board_id: str = ""
    fw_ver: str = ""
    hca_type: str = ""
    node_guid: str = ""
    ports: list[IbSysfsPort] = field(default_factory=list)

    def port(self, number: int) -> IbSysfsPort | None:
        for p in self.ports:
            if p.number == number:
                return p
        return None


def _code(value: str) -> tuple[int | None, str]:
    m = _CODE_RE.match(value)
    if not m:
        return None, value.strip()
    return int(m.group(1)), m.group(2).strip()


def _counter(value: str) -> int | None:
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None  # some counters read as "N/A" or fail with EINVAL on unsupported HCAs


def parse_ib_sysfs(files: Mapping[str, str]) -> list[IbSysfsDevice]:
    """Build devices and ports from ``{"mlx5_0/ports/1/state": "4: ACTIVE", ...}``; sorted by name."""
    devices: dict[str, IbSysfsDevice] = {}
    ports: dict[tuple[str, int], IbSysfsPort] = {}
    for path, content in files.items():
        parts = path.strip("/").split("/")
        value = content.strip()
        dev = devices.setdefault(parts[0], IbSysfsDevice(name=parts[0]))
        if len(parts) == 2:
            if parts[1] in ("board_id", "fw_ver", "hca_type", "node_guid"):
                setattr(dev, parts[1], value)
            continue
        if len(parts) < 4 or parts[1] != "ports" or not parts[2].isdigit():
            continue
        number = int(parts[2])
        port = ports.get((dev.name, number))
        if port is None:
            port = ports[(dev.name, number)] = IbSysfsPort(number=number)
            dev.ports.append(port)
        leaf = parts[3]
        if len(parts) == 5 and leaf in ("counters", "hw_counters"):
            n = _counter(value)
            if n is not None:
                getattr(port, leaf)[parts[4]] = n
        elif len(parts) == 4:
            if leaf == "state":
                port.state_code, port.state = _code(value)
            elif leaf == "phys_state":
                port.phys_state_code, port.phys_state = _code(value)
            elif leaf == "rate":
                m = _RATE_RE.match(value)
                if m:
                    port.rate_gbps = float(m.group(1))
                    port.rate_detail = (m.group(2) or "").strip()
            elif leaf == "link_layer":
                port.link_layer = value
            elif leaf == "lid":
                port.lid = value
    for dev in devices.values():
        dev.ports.sort(key=lambda p: p.number)
    return [devices[name] for name in sorted(devices, key=_natural_key)]


def _natural_key(name: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def parse_flattened(text: str) -> dict[str, str]:
    """Read a flattened dump, one ``relative/path=value`` per line (``#`` comments ignored)."""
    files: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        path, value = line.split("=", 1)
        files[path.strip()] = value
    return files


def parse_grep_output(text: str, root: str = DEFAULT_ROOT) -> dict[str, str]:
    """Read ``grep -s . ROOT/*/ports/*/state ...`` output (``/abs/path:value`` lines) into the
    mapping :func:`parse_ib_sysfs` takes. Paths outside ``root`` are ignored."""
    prefix = root.rstrip("/") + "/"
    files: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or ":" not in line:
            continue
        path, value = line.split(":", 1)
        files[path[len(prefix) :]] = value
    return files


def grep_argv(root: str = DEFAULT_ROOT) -> list[str]:
    """The file globs whose ``grep -s .`` output :func:`parse_grep_output` reads (for a remote shell)."""
    base = root.rstrip("/")
    port = f"{base}/*/ports/*"
    return [
        *(f"{base}/*/{name}" for name in ("board_id", "fw_ver", "hca_type", "node_guid")),
        *(f"{port}/{name}" for name in ("state", "phys_state", "rate", "link_layer", "lid")),
        f"{port}/counters/*",
        f"{port}/hw_counters/*",
    ]


_WANTED_TOP = ("board_id", "fw_ver", "hca_type", "node_guid")
_WANTED_PORT = ("state", "phys_state", "rate", "link_layer", "lid")


def read_ib_sysfs(root: str = DEFAULT_ROOT) -> dict[str, str]:
    """Read the files :func:`parse_ib_sysfs` uses from a live tree (file reads only, no command).

    Unreadable files (counters a driver does not implement raise EINVAL on read) are skipped.
    A missing root gives an empty mapping: no InfiniBand devices.
    """
    files: dict[str, str] = {}

    def grab(rel: str) -> None:
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                files[rel] = fh.read()
        except OSError:
            pass

    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return files
    for dev in devices:
        for name in _WANTED_TOP:
            grab(f"{dev}/{name}")
        try:
            port_numbers = sorted(os.listdir(os.path.join(root, dev, "ports")))
        except OSError:
            continue
        for num in port_numbers:
            for name in _WANTED_PORT:
                grab(f"{dev}/ports/{num}/{name}")
            for sub in ("counters", "hw_counters"):
                try:
                    names = sorted(os.listdir(os.path.join(root, dev, "ports", num, sub)))
                except OSError:
                    continue
                for cname in names:
                    grab(f"{dev}/ports/{num}/{sub}/{cname}")
    return files
