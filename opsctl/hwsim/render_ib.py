"""InfiniBand views of the simulated HCAs: ``ibstat``, the ``/sys/class/infiniband`` tree and
``perfquery -x``, in the layouts of the genuine samples under tests/fixtures/real-world/."""

from __future__ import annotations

import os
from pathlib import Path

from opsctl.hwsim.state import (
    ETH_CAPABILITY_MASK,
    ETH_FW,
    HCA_BOARD_ID,
    HCA_CAPABILITY_MASK,
    HCA_FW,
    Hca,
    NodeHardware,
)

# ibstat word -> (sysfs state file, node_exporter state_id)
_STATE = {"Active": (4, "ACTIVE"), "Down": (1, "DOWN"), "Initializing": (2, "INIT"), "Armed": (3, "ARMED")}
_PHYS = {"Sleep": 1, "Polling": 2, "Disabled": 3, "LinkUp": 5, "LinkErrorRecovery": 6}
_RATE_NAME = {400: "4X NDR", 200: "4X HDR", 100: "4X EDR", 10: "4X SDR"}


class UnknownDevice(KeyError):
    """The tool was asked about an HCA the node does not have."""


def state_id(hca: Hca) -> int:
    return _STATE[hca.state][0]


def phys_state_id(hca: Hca) -> int:
    return _PHYS[hca.physical_state]


def _guid_hex(guid: int) -> str:
    return f"0x{guid:016x}"


def _guid_sysfs(guid: int) -> str:
    h = f"{guid:016x}"
    return ":".join(h[i : i + 4] for i in range(0, 16, 4))


def _lids(hca: Hca) -> tuple[int, int]:
    # A port that is down has no LID assignment from the subnet manager; an Ethernet port never has.
    return (hca.lid, hca.sm_lid) if hca.state == "Active" and hca.link_layer == "InfiniBand" else (0, 0)


def _ethernet(hca: Hca) -> bool:
    return hca.link_layer == "Ethernet"


def firmware(hca: Hca) -> str:
    return ETH_FW if _ethernet(hca) else HCA_FW


def _cap_mask(hca: Hca) -> str:
    return ETH_CAPABILITY_MASK if _ethernet(hca) else HCA_CAPABILITY_MASK


def render_ibstat(state: NodeHardware, ca: str | None = None) -> str:
    hcas = sorted(state.hcas, key=lambda h: h.name)
    if ca is not None:
        hcas = [h for h in hcas if h.name == ca]
        if not hcas:
            raise UnknownDevice(ca)
    out: list[str] = []
    for h in hcas:
        base_lid, sm_lid = _lids(h)
        out += [
            f"CA '{h.name}'",
            f"\tCA type: {h.ca_type}",
            "\tNumber of ports: 1",
            f"\tFirmware version: {firmware(h)}",
            "\tHardware version: 0",
            f"\tNode GUID: {_guid_hex(h.node_guid)}",
            f"\tSystem image GUID: {_guid_hex(h.node_guid)}",
            "\tPort 1:",
            f"\t\tState: {h.state}",
            f"\t\tPhysical state: {h.physical_state}",
            f"\t\tRate: {h.rate_gbps}",
            f"\t\tBase lid: {base_lid}",
            "\t\tLMC: 0",
            f"\t\tSM lid: {sm_lid}",
            f"\t\tCapability mask: {_cap_mask(h)}",
            f"\t\tPort GUID: {_guid_hex(h.port_guid)}",
            f"\t\tLink layer: {h.link_layer}",
        ]
    return "\n".join(out) + "\n"


def sysfs_files(state: NodeHardware, now: float | None = None) -> dict[str, str]:
    """The files of ``/sys/class/infiniband`` as ``{relative path: content}`` (content ends in \\n)."""
    files: dict[str, str] = {}
    for h in state.hcas:
        base_lid, sm_lid = _lids(h)
        code, word = _STATE[h.state]
        d = h.name
        files[f"{d}/board_id"] = HCA_BOARD_ID
        files[f"{d}/fw_ver"] = firmware(h)
        files[f"{d}/hca_type"] = h.ca_type
        files[f"{d}/hw_rev"] = "0x0"
        files[f"{d}/node_guid"] = _guid_sysfs(h.node_guid)
        files[f"{d}/sys_image_guid"] = _guid_sysfs(h.node_guid)
        files[f"{d}/node_type"] = "1: CA"
        files[f"{d}/node_desc"] = f"{state.node} {d}"
        p = f"{d}/ports/1"
        files[f"{p}/state"] = f"{code}: {word}"
        files[f"{p}/phys_state"] = f"{phys_state_id(h)}: {h.physical_state}"
        files[f"{p}/rate"] = f"{h.rate_gbps} Gb/sec ({_RATE_NAME.get(h.rate_gbps, '4X')})"
        files[f"{p}/link_layer"] = h.link_layer
        files[f"{p}/lid"] = f"0x{base_lid:x}"
        files[f"{p}/sm_lid"] = f"0x{sm_lid:x}"
        files[f"{p}/lid_mask_count"] = "0"
        files[f"{p}/sm_sl"] = "0"
        files[f"{p}/cap_mask"] = _cap_mask(h)
        files[f"{p}/pkeys/0"] = "0xffff"  # the default partition, full member
        for link in ("current", "max"):  # the HCA's PCIe Gen5 x16 slot, as the kernel prints it
            files[f"{d}/device/{link}_link_speed"] = "32.0 GT/s PCIe"
            files[f"{d}/device/{link}_link_width"] = "16"
        for name, value in h.current_counters(now).items():
            files[f"{p}/counters/{name}"] = str(value)
        for name, value in h.hw_counters.items():
            files[f"{p}/hw_counters/{name}"] = str(value)
    return {k: v + "\n" for k, v in files.items()}


def write_sysfs_tree(state: NodeHardware, root: str | os.PathLike[str], now: float | None = None) -> Path:
    """Write a real directory tree shaped like ``/sys/class/infiniband`` under ``root``.

    Devices that the state no longer has are removed, so the tree can be rewritten in place.
    """
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    wanted = {h.name for h in state.hcas}
    for old in base.iterdir():
        if old.is_dir() and old.name not in wanted:
            for f in sorted(old.rglob("*"), reverse=True):
                f.rmdir() if f.is_dir() else f.unlink()
            old.rmdir()
    for rel, content in sysfs_files(state, now).items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="ascii")
    return base


_PERFQUERY_X = (
    ("PortXmitData", "port_xmit_data"),
    ("PortRcvData", "port_rcv_data"),
    ("PortXmitPkts", "port_xmit_packets"),
    ("PortRcvPkts", "port_rcv_packets"),
    ("PortUnicastXmitPkts", "unicast_xmit_packets"),
    ("PortUnicastRcvPkts", "unicast_rcv_packets"),
    ("PortMulticastXmitPkts", "multicast_xmit_packets"),
    ("PortMulticastRcvPkts", "multicast_rcv_packets"),
    ("CounterSelect2", None),
    ("SymbolErrorCounter", "symbol_error"),
    ("LinkErrorRecoveryCounter", "link_error_recovery"),
    ("LinkDownedCounter", "link_downed"),
    ("PortRcvErrors", "port_rcv_errors"),
    ("PortRcvRemotePhysicalErrors", "port_rcv_remote_physical_errors"),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors"),
    ("PortXmitDiscards", "port_xmit_discards"),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors"),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors"),
    ("LocalLinkIntegrityErrors", "local_link_integrity_errors"),
    ("ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors"),
    ("VL15Dropped", "VL15_dropped"),
    ("PortXmitWait", "port_xmit_wait"),
    ("QP1Dropped", None),
)


def _dots(name: str, value: object) -> str:
    return f"{name + ':':.<33}{value}"


def render_perfquery_x(
    state: NodeHardware, ca: str | None = None, port: int = 1, now: float | None = None
) -> str:
    """``perfquery -x [-C CA] [-P PORT]``: extended counters of one local port (default: first CA)."""
    hcas = sorted(state.hcas, key=lambda h: h.name)
    hca = hcas[0] if ca is None else next((h for h in hcas if h.name == ca), None)
    if hca is None:
        raise UnknownDevice(ca)
    if port != 1:
        raise UnknownDevice(f"{hca.name} port {port}")
    lines = [
        f"# Port extended counters: Lid {hca.lid} port {port} (CapMask: 0x5300 CapMask2: 0x0000002)",
        _dots("PortSelect", port),
        _dots("CounterSelect", "0x0000"),
    ]
    counters = hca.current_counters(now)
    for name, key in _PERFQUERY_X:
        if name == "CounterSelect2":
            lines.append(_dots(name, "0x00000000"))
        else:
            lines.append(_dots(name, counters.get(key, 0) if key else 0))
    return "\n".join(lines) + "\n"
