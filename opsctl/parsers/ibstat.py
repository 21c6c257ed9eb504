"""Parser for the text output of ``ibstat`` (infiniband-diags, all versions seen: 39.x to 50.x).

Format: one ``CA 'mlx5_0'`` block per host channel adapter, ``Key: value`` lines indented by a
tab (or spaces), then ``Port N:`` blocks indented one level deeper. When ibstat fails part way
(``ibpanic: ...`` on stderr merged into the output, exit status 255) the CAs printed before the
failure are kept and the panic line is reported in ``errors``.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CA_RE = re.compile(r"^CA '([^']+)'\s*$")
_PORT_RE = re.compile(r"^Port (\d+):\s*$")
_KV_RE = re.compile(r"^([A-Za-z][A-Za-z ]*?):\s*(.*)$")


@dataclass
class IbstatPort:
    number: int
    state: str = ""  # Active, Down, Initializing, Armed
    physical_state: str = ""  # LinkUp, Disabled, Polling, ...
    rate: float | None = None  # Gb/s as printed (400 = NDR 4x)
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    capability_mask: str = ""
    port_guid: str = ""
    link_layer: str = ""  # InfiniBand or Ethernet


@dataclass
class IbstatCa:
    name: str
    ca_type: str = ""
    number_of_ports: int | None = None
    firmware_version: str = ""
    hardware_version: str = ""
    node_guid: str = ""
    system_image_guid: str = ""
    ports: list[IbstatPort] = field(default_factory=list)


@dataclass
class IbstatReport:
    cas: list[IbstatCa] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # ibpanic/ibwarn lines, unparsable lines

    def ca(self, name: str) -> IbstatCa | None:
        for ca in self.cas:
            if ca.name == name:
                return ca
        return None


def _int(value: str) -> int | None:
    try:
        return int(value, 0)
    except ValueError:
        return None


def _float(value: str) -> float | None:
    try:
        return float(value.split()[0])
    except (ValueError, IndexError):
        return None


_CA_FIELDS = {
    "CA type": "ca_type",
    "Firmware version": "firmware_version",
    "Hardware version": "hardware_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_PORT_STR_FIELDS = {
    "State": "state",
    "Physical state": "physical_state",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_PORT_INT_FIELDS = {"Base lid": "base_lid", "LMC": "lmc", "SM lid": "sm_lid"}


def parse_ibstat(text: str) -> IbstatReport:
    """Parse ``ibstat`` output (all CAs). Unknown keys are ignored; nothing raises on bad input."""
    report = IbstatReport()
    ca: IbstatCa | None = None
    port: IbstatPort | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("ibpanic:", "ibwarn:", "iberror:")):
            report.errors.append(line)
            continue
        m = _CA_RE.match(line)
        if m and not raw[:1].isspace():
            ca = IbstatCa(name=m.group(1))
            report.cas.append(ca)
            port = None
            continue
        if ca is None:
            report.errors.append(line)
            continue
        m = _PORT_RE.match(line)
        if m:
            port = IbstatPort(number=int(m.group(1)))
            ca.ports.append(port)
            continue
        m = _KV_RE.match(line)
        if not m:
            report.errors.append(line)
            continue
        key, value = m.group(1), m.group(2).strip()
        if port is not None and key in _PORT_STR_FIELDS:
            setattr(port, _PORT_STR_FIELDS[key], value)
        elif port is not None and key in _PORT_INT_FIELDS:
            setattr(port, _PORT_INT_FIELDS[key], _int(value))
        elif port is not None and key == "Rate":
            port.rate = _float(value)
        elif key in _CA_FIELDS:
            setattr(ca, _CA_FIELDS[key], value)
        elif key == "Number of ports":
            ca.number_of_ports = _int(value)
    return report
