"""What ``opsctl preflight --fabric`` reads on each node, besides the hardware discovery: the
InfiniBand port state the subnet manager set (sysfs: firmware, LIDs, SM LID, P_Keys, the HCA's
PCIe link) and the GPU/NIC topology matrix (``nvidia-smi topo -m``). ``nvidia-smi -q`` (fabric
state, PCIe link of each GPU) and the NVSwitch devices come from the discovery's own outputs.

Fixed commands only; the sysfs root is picked as for the discovery ($OPSCTL_IB_SYSFS_ROOT on the
node, else the configured root, else /sys/class/infiniband).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from opsctl.evidence.ssh import CommandResult, ib_root_pick
from opsctl.parsers.ib_sysfs import DEFAULT_ROOT, parse_grep_output
from opsctl.parsers.nvidia_smi_q import GpuQuery, parse_nvidia_smi_q
from opsctl.parsers.nvidia_smi_topo import TopoMatrix, parse_nvidia_smi_topo

_PORT_FILES = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")
_PCI_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
_RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec\s*(?:\(([^)]*)\))?")
_CODE_RE = re.compile(r"^\s*\d+\s*:\s*(.*)$")
_NUM_RE = re.compile(r"^\s*([\d.]+)")


def fabric_commands(ib_sysfs_root: str | None = None) -> dict[str, str]:
    globs = ['"$r"/*/fw_ver', '"$r"/*/ports/*/pkeys/*']
    globs += [f'"$r"/*/ports/*/{name}' for name in _PORT_FILES]
    globs += [f'"$r"/*/device/{name}' for name in _PCI_FILES]
    ib = f'{ib_root_pick(ib_sysfs_root)}; echo "@root=$r"; grep -sH . {" ".join(globs)}; true'
    return {"fabric_ib": ib, "topo": "nvidia-smi topo -m"}


@dataclass
class IbPortFacts:
    hca: str
    port: int
    fw_ver: str = ""
    state: str = ""  # ACTIVE, DOWN, ...
    phys_state: str = ""  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None = None
    rate_detail: str = ""  # "4X NDR"
    link_layer: str = ""
    lid: int | None = None
    sm_lid: int | None = None
    pkeys: list[str] = field(default_factory=list)  # non-zero entries of the P_Key table
    pkeys_read: int = 0  # P_Key table entries read (0: the table was not there)
    pcie_speed_gts: float | None = None
    pcie_width: int | None = None
    pcie_max_speed_gts: float | None = None
    pcie_max_width: int | None = None


@dataclass
class NodeFabricFacts:
    node: str
    ports: list[IbPortFacts] = field(default_factory=list)
    gpus: list[GpuQuery] = field(default_factory=list)
    topo: TopoMatrix | None = None
    topo_error: str = ""
    nvswitch_count: int | None = None
    errors: list[str] = field(default_factory=list)

    def port(self, hca: str) -> IbPortFacts | None:
        return next((p for p in self.ports if p.hca == hca), None)


def _int(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _num(text: str) -> float | None:
    m = _NUM_RE.match(text)
    return float(m.group(1)) if m else None


def _word(text: str) -> str:
    m = _CODE_RE.match(text)
    return (m.group(1) if m else text).strip()


def ib_ports_from_grep(text: str) -> list[IbPortFacts]:
    """The ``fabric_ib`` command's output (``@root=`` line, then ``grep -sH .`` lines)."""
    root_line, _, rest = text.partition("\n")
    root = root_line.removeprefix("@root=").strip() or DEFAULT_ROOT
    files = parse_grep_output(rest, root)
    ports: dict[tuple[str, int], IbPortFacts] = {}
    fw: dict[str, str] = {}
    pci: dict[str, dict[str, str]] = {}
    for rel, value in sorted(files.items()):
        parts = rel.split("/")
        if len(parts) == 2 and parts[1] == "fw_ver":
            fw[parts[0]] = value.strip()
        elif len(parts) == 3 and parts[1] == "device" and parts[2] in _PCI_FILES:
            pci.setdefault(parts[0], {})[parts[2]] = value.strip()
        elif len(parts) >= 4 and parts[1] == "ports" and parts[2].isdigit():
            key = (parts[0], int(parts[2]))
            p = ports.setdefault(key, IbPortFacts(parts[0], int(parts[2])))
            name = parts[3]
            if name == "pkeys" and len(parts) == 5:
                p.pkeys_read += 1
                pkey = value.strip().lower()
                if pkey not in ("0x0000", "0x0", "0"):
                    p.pkeys.append(pkey)
            elif name == "state":
                p.state = _word(value)
            elif name == "phys_state":
                p.phys_state = _word(value)
            elif name == "rate":
                m = _RATE_RE.match(value)
                if m:
                    p.rate_gbps, p.rate_detail = float(m.group(1)), (m.group(2) or "").strip()
            elif name == "link_layer":
                p.link_layer = value.strip()
            elif name == "lid":
                p.lid = _int(value)
            elif name == "sm_lid":
                p.sm_lid = _int(value)
    out = []
    for (hca, _), p in sorted(ports.items(), key=lambda kv: (_natural(kv[0][0]), kv[0][1])):
        p.fw_ver = fw.get(hca, "")
        link = pci.get(hca, {})
        p.pcie_speed_gts = _num(link.get("current_link_speed", ""))
        p.pcie_max_speed_gts = _num(link.get("max_link_speed", ""))
        p.pcie_width = _int(link.get("current_link_width", ""))
        p.pcie_max_width = _int(link.get("max_link_width", ""))
        out.append(p)
    return out


def _natural(name: str) -> tuple[str, int]:
    m = re.match(r"^(.*?)(\d+)$", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def fabric_facts(node: str, out: dict[str, CommandResult], nvswitch_count: int | None) -> NodeFabricFacts:
    """Pure: the discovery's and :func:`fabric_commands`' outputs on one node -> its facts."""
    f = NodeFabricFacts(node, nvswitch_count=nvswitch_count)
    ib = out.get("fabric_ib")
    if ib is not None and ib.ok:
        f.ports = ib_ports_from_grep(ib.stdout)
    else:
        f.errors.append("InfiniBand sysfs not readable")
    smi = out.get("nvidia_smi")
    if smi is not None and smi.ok:
        f.gpus = parse_nvidia_smi_q(smi.stdout).gpus
    topo = out.get("topo")
    if topo is not None and topo.ok:
        f.topo = parse_nvidia_smi_topo(topo.stdout)
        if not f.topo.columns:
            f.topo, f.topo_error = None, "nvidia-smi topo -m printed no matrix"
    else:
        why = (topo.stderr or topo.stdout).strip()[:160] if topo is not None else "not run"
        f.topo_error = f"nvidia-smi topo -m: {why or 'failed'}"
    return f
