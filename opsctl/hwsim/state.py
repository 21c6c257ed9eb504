"""The simulated hardware of one node: an HGX H200 (8 GPUs) with 8 ConnectX-7 NDR HCAs, or
another port layout of its RDMA devices (``HCA_LAYOUTS``).

One JSON file per node holds it. ``make_node`` builds a healthy node deterministically from the node
name (same name, same UUIDs, serials, GUIDs, LIDs and counters), so a fleet of simulated nodes is
reproducible run after run. Writers replace the file atomically, so a reader (the exporter, a shim)
never sees half a file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_COUNT = 8
HCA_COUNT = 8
NVLINK_COUNT = 18  # NVLink 4 on Hopper: 18 links per GPU
PRODUCT_NAME = "NVIDIA H200"
FB_TOTAL_MIB = 143771  # 141 GB HBM3e as nvidia-smi reports it
FB_RESERVED_MIB = 551
DRIVER_VERSION = "535.183.01"
CUDA_VERSION = "12.2"
# Bus numbers of the eight SXM GPUs on an HGX baseboard, in nvidia-smi (bus id) order.
GPU_PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
GPU_MODULE_IDS = (2, 4, 3, 1, 7, 5, 8, 6)
# The ConnectX-7 HCA next to each GPU (same PCIe switch), as on HGX systems.
HCA_PCI_BUSES = (0x1A, 0x2C, 0x3C, 0x5F, 0x9C, 0xAD, 0xBC, 0xDD)
HCA_RATE_GBPS = 400
HCA_TYPE = "MT4129"  # ConnectX-7
HCA_FW = "28.39.1002"
HCA_BOARD_ID = "MT_0000000838"
HCA_CAPABILITY_MASK = "0xa751e848"
ETH_TYPE = "MT4125"  # ConnectX-6 Dx, Ethernet only
ETH_FW = "22.38.1002"
ETH_CAPABILITY_MASK = "0x00010000"


@dataclass(frozen=True)
class HcaPort:
    """One RDMA device of a layout as the node has it when healthy."""

    name: str
    link_layer: str = "InfiniBand"  # or Ethernet (RoCE): same class in sysfs, no subnet manager
    state: str = "Active"
    physical_state: str = "LinkUp"
    rate_gbps: int = HCA_RATE_GBPS
    ca_type: str = HCA_TYPE
    pci_bus: int = 0


def _eth(name: str, bus: int, *, up: bool) -> HcaPort:
    if up:
        return HcaPort(name, "Ethernet", "Active", "LinkUp", 100, ETH_TYPE, bus)
    return HcaPort(name, "Ethernet", "Down", "Disabled", 40, ETH_TYPE, bus)


# Port layouts, each the healthy state of a genuine sample (tests/unit/hwsim/test_hca_layouts.py
# diffs them against it). "h200-ndr8": the reference node, eight ConnectX-7 NDR InfiniBand ports
# (the InfiniBand ports of ibstat.h100.some_down.gpud.txt), one beside each GPU. "h100-ndr8-eth4":
# that H100 node as sampled: the same eight fabric ports numbered mlx5_0,3-6,9-11, and four
# Ethernet ports of ConnectX-6 Dx cards (mlx5_1 up at 100 Gb/s; mlx5_2,7,8 disabled), which
# node_exporter exports as node_infiniband_* series like the fabric's.
HCA_LAYOUTS: dict[str, tuple[HcaPort, ...]] = {
    "h200-ndr8": tuple(HcaPort(f"mlx5_{i}", pci_bus=bus) for i, bus in enumerate(HCA_PCI_BUSES)),
    "h100-ndr8-eth4": (
        HcaPort("mlx5_0", pci_bus=0x1A),
        _eth("mlx5_1", 0x1F, up=True),
        _eth("mlx5_2", 0x1F, up=False),
        *(HcaPort(f"mlx5_{i}", pci_bus=bus) for i, bus in ((3, 0x2C), (4, 0x3C), (5, 0x5F), (6, 0x9C))),
        _eth("mlx5_7", 0xA0, up=False),
        _eth("mlx5_8", 0xA0, up=False),
        *(HcaPort(f"mlx5_{i}", pci_bus=bus) for i, bus in ((9, 0xAD), (10, 0xBC), (11, 0xDD))),
    ),
}
DEFAULT_HCA_LAYOUT = "h200-ndr8"


def fabric_hcas(layout: str) -> list[str]:
    """The InfiniBand devices of a layout: what an inventory lists as its fabric HCAs."""
    return [p.name for p in _layout(layout) if p.link_layer == "InfiniBand"]


def _layout(name: str) -> tuple[HcaPort, ...]:
    try:
        return HCA_LAYOUTS[name]
    except KeyError:
        raise ValueError(f"unknown HCA layout {name!r} (known: {', '.join(sorted(HCA_LAYOUTS))})") from None
SM_LID = 1
# nvmlDeviceGpuRecoveryAction_t (NVML; DCGM field 1523 DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION)
RECOVERY_NONE = 0
RECOVERY_GPU_RESET = 1
RECOVERY_NODE_REBOOT = 2
RECOVERY_DRAIN_P2P = 3
RECOVERY_DRAIN_AND_RESET = 4

# sysfs counter file names under ports/1/counters and ports/1/hw_counters (mlx5, genuine names).
IB_COUNTERS = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)
IB_HW_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "rx_atomic_requests",
    "rx_read_requests",
    "rx_write_requests",
)


@dataclass
class NvLink:
    link: int
    up: bool = True
    crc_flit_errors: int = 0
    crc_data_errors: int = 0
    replay_errors: int = 0
    recovery_errors: int = 0


@dataclass
class Gpu:
    index: int
    bus_id: str  # "00000000:18:00.0"
    uuid: str
    serial: str
    module_id: int
    numa_node: int
    present: bool = True
    temperature_c: int = 34
    memory_temperature_c: int = 42
    power_draw_w: float = 72.0
    power_limit_w: float = 700.0
    sm_clock_mhz: int = 345
    memory_clock_mhz: int = 3201
    max_sm_clock_mhz: int = 1980
    gpu_util_pct: int = 0
    mem_util_pct: int = 0
    fb_total_mib: int = FB_TOTAL_MIB
    fb_reserved_mib: int = FB_RESERVED_MIB
    fb_used_mib: int = 0
    pcie_gen_current: int = 5
    pcie_gen_max: int = 5
    pcie_width_current: int = 16
    pcie_width_max: int = 16
    pcie_replays: int = 0
    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    ecc_sbe_aggregate: int = 0
    ecc_dbe_aggregate: int = 0
    retired_pages_sbe: int = 0
    retired_pages_dbe: int = 0
    retired_pages_pending: bool = False
    remapped_rows_correctable: int = 0
    remapped_rows_uncorrectable: int = 0
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False
    # NVML clocks-event (formerly "throttle") reasons bitmask; 0x1 = GPU idle.
    clock_event_reasons: int = 0x1
    last_xid: int = 0
    reset_required: bool = False
    drain_and_reset_recommended: bool = False
    # NVML nvmlDeviceGpuRecoveryAction_t as DCGM field 1523 reports it: what the driver asks for now
    recovery_action: int = RECOVERY_NONE
    # Start of DCGM's own view of this GPU's XIDs: resetting a GPU means stopping the DCGM host
    # engine (it holds the device), whose field cache - the last XID and the XID count window -
    # starts empty again. The kernel log keeps the events.
    dcgm_xid_since: float = 0.0
    energy_mj: int = 0
    # DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: the NVLink bandwidth counter summed over lanes (idle: 0)
    nvlink_bandwidth_total: int = 0
    nvlinks: list[NvLink] = field(default_factory=list)

    @property
    def pci_short(self) -> str:
        """The bus id as the kernel prints it in XID lines: ``0000:18:00``."""
        return self.bus_id[4:-2].lower()

    @property
    def fb_free_mib(self) -> int:
        return self.fb_total_mib - self.fb_reserved_mib - self.fb_used_mib


@dataclass
class Hca:
    name: str  # mlx5_0
    pci_bus: str  # "0000:1a:00.0"
    node_guid: int
    lid: int
    state: str = "Active"  # ibstat words: Active, Down, Initializing, Armed
    physical_state: str = "LinkUp"  # LinkUp, Polling, Disabled
    rate_gbps: int = HCA_RATE_GBPS
    sm_lid: int = SM_LID
    link_layer: str = "InfiniBand"  # Ethernet: a RoCE port, no LIDs, no subnet manager
    ca_type: str = HCA_TYPE
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    # Traffic of a running job: the data and packet counters grow at this rate from traffic_since.
    traffic_bytes_per_s: float = 0.0
    traffic_since: float = 0.0

    @property
    def port_guid(self) -> int:
        return self.node_guid

    def current_counters(self, now: float | None = None) -> dict[str, int]:
        """The counters as read at ``now``: the stored values plus the traffic since then."""
        out = dict(self.counters)
        if self.traffic_bytes_per_s <= 0 or self.state != "Active":
            return out
        moved = self.traffic_bytes_per_s * max(
            0.0, (time.time() if now is None else now) - self.traffic_since
        )
        words, packets = int(moved // 4), int(moved // 4096)  # data counters count 32-bit words
        for key, extra in (
            ("port_xmit_data", words),
            ("port_rcv_data", words),
            ("port_xmit_packets", packets),
            ("port_rcv_packets", packets),
            ("unicast_xmit_packets", packets),
            ("unicast_rcv_packets", packets),
        ):
            out[key] = out.get(key, 0) + extra
        return out

    def settle_traffic(self, now: float | None = None) -> None:
        """Fold the traffic so far into the stored counters (before the rate or the link changes)."""
        now = time.time() if now is None else now
        self.counters = self.current_counters(now)
        self.traffic_since = now


@dataclass
class XidEvent:
    time: float  # epoch seconds
    gpu: int
    xid: int
    pid: int | None  # None: the driver printed pid='<unknown>'
    process: str
    message: str


@dataclass
class NodeHardware:
    node: str
    seed: int
    boot_time: float  # unix seconds of the current kernel boot (/proc/stat btime)
    # the kernel's random boot_id (/proc/sys/kernel/random/boot_id): new at every boot, unmoved by a
    # clock step; "" in state files written before it (from_dict gives those one)
    boot_id: str = ""
    driver_version: str = DRIVER_VERSION
    cuda_version: str = CUDA_VERSION
    gpus: list[Gpu] = field(default_factory=list)
    hcas: list[Hca] = field(default_factory=list)
    xids: list[XidEvent] = field(default_factory=list)
    slurmd_up: bool = True
    dcgm_exporter_up: bool = True
    node_exporter_up: bool = True
    diag_killed: bool = False  # dcgmi diag cannot complete: its NVVS process dies
    hca_layout: str = DEFAULT_HCA_LAYOUT  # which HCA_LAYOUTS entry the healthy node has
    faults: list[str] = field(default_factory=list)  # applied fault specs, in order

    def gpu(self, index: int) -> Gpu:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(index)

    def hca(self, name: str) -> Hca:
        for hca in self.hcas:
            if hca.name == name:
                return hca
        raise KeyError(name)

    @property
    def present_gpus(self) -> list[Gpu]:
        return [g for g in self.gpus if g.present]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeHardware:
        d = dict(data)
        gpus = []
        for g in d.pop("gpus", []):
            g = dict(g)
            links = [NvLink(**n) for n in g.pop("nvlinks", [])]
            gpus.append(Gpu(**g, nvlinks=links))
        hcas = [Hca(**h) for h in d.pop("hcas", [])]
        xids = [XidEvent(**x) for x in d.pop("xids", [])]
        if not d.get("boot_id"):  # an older state file: one id per (node, boot), stable across loads
            d["boot_id"] = derived_boot_id(int(d["seed"]), float(d["boot_time"]))
        return cls(**d, gpus=gpus, hcas=hcas, xids=xids)


def new_boot_id() -> str:
    """A fresh kernel boot_id, as the kernel makes one at each boot: a random (version 4) UUID."""
    return str(uuid.uuid4())


def derived_boot_id(seed: int, boot_time: float) -> str:
    """The boot_id of a node's seeded boot: random-looking, the same for the same node and boot."""
    digest = hashlib.sha256(f"{seed}:{int(boot_time)}".encode()).digest()[:16]
    return str(uuid.UUID(bytes=digest, version=4))


def node_seed(node: str) -> int:
    """A stable 64-bit seed from the node name (not Python's randomized ``hash``)."""
    return int.from_bytes(hashlib.sha256(node.encode()).digest()[:8], "big")


def node_number(node: str) -> int:
    """The trailing number of a node name (``gpu-017`` -> 17), or a stable number from its hash."""
    m = re.search(r"(\d+)$", node)
    return int(m.group(1)) if m else node_seed(node) % 4096


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def make_node(node: str, *, now: float | None = None, hca_layout: str = DEFAULT_HCA_LAYOUT) -> NodeHardware:
    """A healthy H200 node, identical for the same name (``now`` only sets the boot time), with the
    RDMA devices of ``hca_layout``."""
    layout = _layout(hca_layout)
    seed = node_seed(node)
    rng = random.Random(seed)
    uptime = rng.randint(2 * 86400, 40 * 86400)
    boot_time = (time.time() if now is None else now) - uptime
    number = node_number(node)
    gpus: list[Gpu] = []
    for i in range(GPU_COUNT):
        temp = rng.randint(30, 38)
        gpus.append(
            Gpu(
                index=i,
                bus_id=f"00000000:{GPU_PCI_BUSES[i]:02X}:00.0",
                uuid=_uuid(rng),
                serial=f"165{rng.randint(0, 9999999999):010d}",
                module_id=GPU_MODULE_IDS[i],
                numa_node=0 if i < GPU_COUNT // 2 else 1,
                temperature_c=temp,
                memory_temperature_c=temp + rng.randint(6, 10),
                power_draw_w=round(rng.uniform(68.0, 78.0), 2),
                pcie_replays=rng.randint(0, 150),
                energy_mj=rng.randint(10**10, 9 * 10**10),
                nvlinks=[NvLink(link=n) for n in range(NVLINK_COUNT)],
            )
        )
    guid_base = 0xA088C20300000000 | (rng.getrandbits(16) << 8)
    hcas: list[Hca] = []
    for i, port in enumerate(layout):
        data = rng.randint(10**13, 9 * 10**14)
        pkts = data // rng.randint(180, 260)
        counters = {name: 0 for name in IB_COUNTERS}
        counters.update(
            port_rcv_data=data,
            port_xmit_data=data + rng.randint(-(10**12), 10**12),
            port_rcv_packets=pkts,
            port_xmit_packets=pkts + rng.randint(-(10**9), 10**9),
            unicast_rcv_packets=pkts,
            unicast_xmit_packets=pkts + rng.randint(-(10**9), 10**9),
            port_xmit_wait=rng.randint(10**6, 5 * 10**9),
        )
        counters["port_xmit_packets"] = counters["unicast_xmit_packets"]
        hw = {name: 0 for name in IB_HW_COUNTERS}
        hw.update(
            lifespan=12,
            rx_read_requests=rng.randint(10**6, 10**8),
            rx_write_requests=rng.randint(10**8, 10**10),
        )
        hcas.append(
            Hca(
                name=port.name,
                pci_bus=f"0000:{port.pci_bus:02x}:00.0",
                node_guid=guid_base + i,
                # unique across the fabric (LID 1 is the SM); a RoCE port has none
                lid=number * max(HCA_COUNT, len(layout)) + i + 2 if port.link_layer == "InfiniBand" else 0,
                state=port.state,
                physical_state=port.physical_state,
                rate_gbps=port.rate_gbps,
                link_layer=port.link_layer,
                ca_type=port.ca_type,
                counters=counters,
                hw_counters=hw,
            )
        )
    return NodeHardware(
        node=node,
        seed=seed,
        boot_time=boot_time,
        boot_id=derived_boot_id(seed, boot_time),
        gpus=gpus,
        hcas=hcas,
        hca_layout=hca_layout,
    )


def load(path: str | os.PathLike[str]) -> NodeHardware:
    with open(path, encoding="utf-8") as f:
        return NodeHardware.from_dict(json.load(f))


def save(state: NodeHardware, path: str | os.PathLike[str]) -> None:
    """Write atomically (temp file + rename) so concurrent readers see the old or the new state.

    A symlink (the lab's ``state.json`` -> ``NODE.json``) is followed, not replaced.
    """
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state.to_dict(), f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def state_path(state_dir: str | os.PathLike[str], node: str) -> Path:
    return Path(state_dir) / f"{node}.json"


def ensure_node(state_dir: str | os.PathLike[str], node: str) -> NodeHardware:
    """Load a node's state, creating the healthy default the first time."""
    path = state_path(state_dir, node)
    if path.exists():
        return load(path)
    state = make_node(node)
    save(state, path)
    return state
