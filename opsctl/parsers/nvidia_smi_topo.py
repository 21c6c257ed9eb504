"""Parser for ``nvidia-smi topo -m`` (the topology matrix), drivers 470 to 570.

The matrix has one column per GPU and NIC, then ``CPU Affinity``, ``NUMA Affinity`` and (535+)
``GPU NUMA ID``; one row per GPU and NIC. A cell says how two devices connect: ``X`` (itself),
``NV#`` (# bonded NVLinks), ``PIX`` (at most one PCIe bridge), ``PXB`` (several bridges, no host
bridge), ``PHB`` (through a PCIe host bridge), ``NODE`` (across host bridges of one NUMA node),
``SYS`` (across the CPU interconnect between NUMA nodes). The ``NIC Legend`` maps ``NIC0`` to its
RDMA device (``mlx5_0``); without a legend the NIC keeps its matrix name.

nvidia-smi separates the cells by tabs; copies from a terminal often expand them to spaces, which
this parser also reads (an empty affinity cell can then not be told apart, so the affinities of
such a copy are read by position only when every column is present).

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Closest first: the order NCCL and GPUDirect RDMA care about.
LINK_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
_DEVICE_RE = re.compile(r"^(GPU|NIC|mlx5_|NVSwitch)\w*$")
_LEGEND_RE = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_TAIL_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


@dataclass
class TopoRow:
    name: str  # "GPU0", "NIC3" (or the device name when the matrix uses it)
    links: dict[str, str] = field(default_factory=dict)  # column -> "PIX", "NV18", "X", ...
    cpu_affinity: str = ""
    numa_affinity: int | None = None


@dataclass
class TopoMatrix:
    columns: list[str] = field(default_factory=list)  # device columns, in order
    rows: dict[str, TopoRow] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"

    @property
    def gpus(self) -> list[str]:
        return [c for c in self.columns if c.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [c for c in self.columns if not c.startswith("GPU")]

    def nic_device(self, column: str) -> str:
        return self.nic_names.get(column, column)

    def link(self, a: str, b: str) -> str:
        row = self.rows.get(a)
        return row.links.get(b, "") if row else ""

    def nearest_nics(self, gpu: str) -> list[tuple[str, str]]:
        """``(rdma device, link)`` for every NIC, closest first (ties in matrix order)."""
        out = [(self.nic_device(n), self.link(gpu, n)) for n in self.nics]
        known = [(d, link) for d, link in out if link in LINK_RANK]
        return sorted(known, key=lambda dl: LINK_RANK[dl[1]])


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return line.split()  # expanded tabs: no row cell has a space in it


def _header(line: str) -> list[str] | None:
    cells = [c for c in _cells(line) if c]
    if "\t" not in line:
        # spaces: the tail headers contain spaces themselves
        text = line.strip()
        for tail in _TAIL_COLUMNS:
            text = text.replace(tail, tail.replace(" ", "_"))
        cells = [c.replace("_", " ") if c.replace("_", " ") in _TAIL_COLUMNS else c for c in text.split()]
    devices = [c for c in cells if _DEVICE_RE.match(c)]
    if not devices or not devices[0].startswith("GPU"):
        return None
    return cells


def parse_nvidia_smi_topo(text: str) -> TopoMatrix:
    m = TopoMatrix()
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        lm = _LEGEND_RE.match(line)
        if lm:
            m.nic_names[lm.group(1)] = lm.group(2)
            continue
        if header is None:
            header = _header(line)
            if header is not None:
                m.columns = [c for c in header if _DEVICE_RE.match(c)]
            continue
        cells = _cells(line)
        if not cells or not _DEVICE_RE.match(cells[0]) or cells[0] not in m.columns:
            continue
        name, values = cells[0], cells[1:]
        row = TopoRow(name)
        for col, value in zip(m.columns, values, strict=False):
            row.links[col] = value.strip() or ""
        rest = values[len(m.columns) :]
        if "\t" in line:
            tail = dict(zip(header[len(m.columns) :], rest, strict=False))
        else:
            # expanded spaces drop empty cells: only the leading affinity columns are certain
            tail = dict(zip(("CPU Affinity", "NUMA Affinity"), rest, strict=False))
        row.cpu_affinity = tail.get("CPU Affinity", "").strip()
        numa = tail.get("NUMA Affinity", "").strip()
        row.numa_affinity = int(numa) if numa.isdigit() else None
        m.rows[name] = row
    return m
