"""Simulated fabric tools: ``ib_write_bw`` (perftest), ``all_reduce_perf`` (nccl-tests) and
``nvidia-smi topo -m``, in the formats of the genuine tools, driven by the simulated hardware.

    ib_write_bw -d mlx5_3 -p 18518 -s 1048576 -n 5000 -F --report_gbits [--use_cuda=3 --use_cuda_dmabuf]
    ib_write_bw ... HOST             (the client: connects to the server on HOST:port)
    all_reduce_perf -b 1G -e 8G -f 2 -g 8        (one node; under srun, rank 0 reports for all)
    nvidia-smi topo -m

A pair test needs both ends, as perftest does: the server listens on TCP (perftest's out-of-band
exchange, default port 18515), the client connects, and each side sends the other what its HCA
looks like (state, rate, LID, fabric faults). The bandwidth is computed from both ends: the slower
HCA, a slow rail on either node, a bad cable between exactly these two nodes. So a fault on one
node's rail shows with every partner, and a bad cable only with that partner.

Fabric faults live next to a node's state file (``gpu-001.json`` -> ``gpu-001.fabric.json``), in
this module only (the base hardware state has no field for them)::

    python -m opsctl.hwsim.tools fabric STATE_FILE slow_rail=mlx5_3[,gbps=180]
    python -m opsctl.hwsim.tools fabric STATE_FILE bad_cable[,gbps=40] --peer PEER_STATE_FILE
    python -m opsctl.hwsim.tools fabric STATE_FILE "nvlink_fabric=In Progress"
    python -m opsctl.hwsim.tools fabric STATE_FILE --heal [--peer PEER_STATE_FILE]

``all_reduce_perf`` under srun reads the other nodes' states from ``$HWSIM_STATE_DIR``
(``<node>.json``) where they are all there; on separate machines (the lab) every rank sends its
node's state to rank 0 over TCP, as NCCL's bootstrap connects the ranks; alone it reads its own
node's state. Standard library only (the lab copies this
package into machines with Debian's bare python3). Simulators: nothing here is ever installed on a
production node.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from opsctl.hwsim.faults import FaultError, parse_spec
from opsctl.hwsim.state import NVLINK_COUNT, PRODUCT_NAME, Gpu, NodeHardware, load

SHIM_NAMES = ("ib_write_bw", "all_reduce_perf")
PERFTEST_PORT = 18515
RULE = "-" * 87
# What one NDR rail delivers of its signalling rate in an RDMA write test (392 of 400 Gb/s, as on
# the genuine ConnectX-7 sample), and NCCL's all-reduce of its links.
RDMA_EFFICIENCY = 0.981
NVLINK_BUSBW_GBS = 480.0  # all_reduce busbw plateau of 8 Hopper GPUs on NVSwitch (H100 sample: 482)
RING_EFFICIENCY = 0.95
HALF_SIZE = 64 * 2**20  # message size at which the collective reaches half its plateau
FABRIC_STATES = ("Not Started", "In Progress", "Completed", "Not Supported")
FABRIC_FAULTS = ("slow_rail", "bad_cable", "nvlink_fabric")  # the names apply_fabric_fault knows


class FabricToolError(Exception):
    """What the simulated tool prints on stderr, with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- fabric faults ----------------------------------------------------------------------------
@dataclass
class FabricFaults:
    rails: dict[str, float] = field(default_factory=dict)  # HCA -> Gb/s it delivers at most
    links: dict[str, float] = field(default_factory=dict)  # peer node -> Gb/s the path carries
    nvlink_fabric: str = ""  # "" = Completed; else the fabric state every GPU reports


def state_file(path: str | os.PathLike[str] | None) -> Path:
    """The state file a shim reads: the one given, else ``$HWSIM_STATE``, else the default (the
    same resolution as the other shims)."""
    from opsctl.hwsim.tools import DEFAULT_STATE, STATE_ENV

    return Path(path or os.environ.get(STATE_ENV) or DEFAULT_STATE)


def fabric_path(state: str | os.PathLike[str]) -> Path:
    """``gpu-001.json`` -> ``gpu-001.fabric.json`` (through the lab's ``state.json`` link)."""
    real = Path(state).resolve()
    return real.with_name(real.name.removesuffix(".json") + ".fabric.json")


def load_faults(state: str | os.PathLike[str]) -> FabricFaults:
    try:
        data = json.loads(fabric_path(state).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return FabricFaults()
    return FabricFaults(
        rails={k: float(x) for k, x in data.get("rails", {}).items()},
        links={k: float(x) for k, x in data.get("links", {}).items()},
        nvlink_fabric=str(data.get("nvlink_fabric", "")),
    )


def save_faults(state: str | os.PathLike[str], faults: FabricFaults) -> None:
    path = fabric_path(state)
    if faults == FabricFaults():
        path.unlink(missing_ok=True)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(faults), f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _gbps(spec_params: dict[str, str], default: float) -> float:
    text = spec_params.get("gbps")
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise FaultError(f"gbps must be a number, not {text!r}") from None
    if value < 0:
        raise FaultError(f"gbps must be >= 0, not {value:g}")
    return value


def apply_fabric_fault(
    state: str | os.PathLike[str], spec: str, peer: str | os.PathLike[str] | None = None
) -> None:
    """Record a fabric fault for the node of ``state`` (and its peer for a bad cable)."""
    s = parse_spec(spec)
    node = load(state)
    faults = load_faults(state)
    if s.name == "slow_rail":
        hca = s.value or s.params.get("hca") or ""
        if hca not in {h.name for h in node.hcas}:
            raise FaultError(f"fault 'slow_rail': no HCA {hca!r} on {node.node}")
        faults.rails[hca] = _gbps(s.params, 180.0)
        save_faults(state, faults)
    elif s.name == "bad_cable":
        if peer is None:
            raise FaultError("fault 'bad_cable' needs the peer's state file (--peer)")
        other = load(peer)
        if other.node == node.node:
            raise FaultError("fault 'bad_cable': a node has no cable to itself")
        gbps = _gbps(s.params, 40.0)
        faults.links[other.node] = gbps
        save_faults(state, faults)
        theirs = load_faults(peer)
        theirs.links[node.node] = gbps
        save_faults(peer, theirs)
    elif s.name == "nvlink_fabric":
        value = s.value or "In Progress"
        if value not in FABRIC_STATES or value == "Completed":
            raise FaultError(f"fault 'nvlink_fabric': one of Not Started, In Progress (got {value!r})")
        faults.nvlink_fabric = value
        save_faults(state, faults)
    else:
        raise FaultError(f"unknown fabric fault {s.name!r}; known: bad_cable, nvlink_fabric, slow_rail")


def fault_specs(faults: FabricFaults) -> list[str]:
    """The active fabric faults as fault specs (``slow_rail=mlx5_3,gbps=180``), for listings."""
    out = [f"slow_rail={hca},gbps={gbps:g}" for hca, gbps in sorted(faults.rails.items())]
    out += [f"bad_cable={peer},gbps={gbps:g}" for peer, gbps in sorted(faults.links.items())]
    if faults.nvlink_fabric:
        out.append(f"nvlink_fabric={faults.nvlink_fabric}")
    return out


def heal_fabric(state: str | os.PathLike[str], peer: str | os.PathLike[str] | None = None) -> None:
    node = load(state).node
    save_faults(state, FabricFaults())
    if peer is not None:
        theirs = load_faults(peer)
        theirs.links.pop(node, None)
        save_faults(peer, theirs)


def fabric(argv: Sequence[str]) -> str:
    ap = argparse.ArgumentParser(prog="hwsim fabric")
    ap.add_argument("state_file")
    ap.add_argument("spec", nargs="?")
    ap.add_argument("--peer", help="the other end's state file (bad_cable)")
    ap.add_argument("--heal", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.heal:
            heal_fabric(args.state_file, args.peer)
        elif args.spec:
            apply_fabric_fault(args.state_file, args.spec, args.peer)
        else:
            raise FabricToolError("give a fabric fault spec or --heal", 2)
    except FaultError as exc:
        raise FabricToolError(str(exc), 2) from None
    except (OSError, ValueError) as exc:
        raise FabricToolError(f"cannot read simulated hardware state: {exc}", 2) from None
    return ""


def _load_state(path: str | None) -> tuple[NodeHardware, Path]:
    where = state_file(path)
    try:
        return load(where), where
    except FileNotFoundError:
        raise FabricToolError(
            f"no simulated hardware state at {where} (set --state or $HWSIM_STATE)", 2
        ) from None
    except (OSError, ValueError, TypeError) as exc:
        raise FabricToolError(f"cannot read simulated hardware state {where}: {exc}", 2) from None


# -- nvidia-smi topo -m and the fabric state in nvidia-smi -q ---------------------------------
_CPUS = ("0-55,112-167", "56-111,168-223")  # 2 x 56 cores x 2 threads, as the inventory declares
_FABRIC_RE = re.compile(r"(\n    Fabric\n {8}State\s+: )Completed(\n {8}Status\s+: )Success")


def _numa_of_hca(state: NodeHardware, i: int) -> int:
    return 0 if i < len(state.hcas) // 2 else 1


def render_topo(state: NodeHardware) -> str:
    """``nvidia-smi topo -m``: each HCA on the PCIe switch of the GPU of the same index (as the
    HGX baseboard wires them), the other NICs of the socket at NODE, the far socket at SYS."""
    gpus = state.present_gpus
    nics = [f"NIC{i}" for i in range(len(state.hcas))]
    cols = [f"GPU{n}" for n in range(len(gpus))] + nics
    lines = ["\t" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]

    def nv(a: Gpu, b: Gpu) -> str:
        return f"NV{min(sum(link.up for link in a.nvlinks), sum(link.up for link in b.nvlinks))}"

    def pci(gpu_numa: int, gpu_index: int | None, hca_i: int) -> str:
        if gpu_index == hca_i:
            return "PIX"
        return "NODE" if _numa_of_hca(state, hca_i) == gpu_numa else "SYS"

    for n, g in enumerate(gpus):
        cells = [" X " if m == n else nv(g, h) for m, h in enumerate(gpus)]
        cells += [pci(g.numa_node, g.index, i) for i in range(len(state.hcas))]
        lines.append("\t".join([f"GPU{n}", *cells, _CPUS[g.numa_node % 2], str(g.numa_node), "", "N/A"]))
    for i, _ in enumerate(state.hcas):
        numa = _numa_of_hca(state, i)
        cells = [pci(g.numa_node, g.index, i) for g in gpus]
        cells += [
            " X " if j == i else ("NODE" if _numa_of_hca(state, j) == numa else "SYS")
            for j in range(len(nics))
        ]
        lines.append("\t".join([f"NIC{i}", *cells, "", "", "", ""]))
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",  # noqa: E501 (the genuine line)
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",  # noqa: E501 (the genuine line)
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "  NV#  = Connection traversing a bonded set of # NVLinks",
        "",
        "NIC Legend:",
        "",
        *(f"  NIC{i}: {h.name}" for i, h in enumerate(state.hcas)),
        "",
    ]
    return "\n".join(lines) + "\n"


def with_fabric(base: Callable[[Sequence[str]], str]) -> Callable[[Sequence[str]], str]:
    """The simulated ``nvidia-smi`` with ``topo -m`` added and the injected NVLink fabric state
    shown in ``-q`` (everything else is ``base``'s)."""

    def nvidia_smi(argv: Sequence[str]) -> str:
        args = list(argv)
        path = None
        for i, a in enumerate(args):
            if a == "--state" and i + 1 < len(args):
                path = args[i + 1]
            elif a.startswith("--state="):
                path = a.split("=", 1)[1]
        words = [
            a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] != "--state")
        ]
        if words[:1] == ["topo"]:
            if "-m" not in args and "--matrix" not in args:
                raise FabricToolError("simulated nvidia-smi topo supports only -m", 2)
            state, _ = _load_state(path)
            if not state.present_gpus:
                raise FabricToolError("No devices were found", 6)
            return render_topo(state)
        text = base(argv)
        if "-q" in args or "--query" in args:
            _, where = _load_state(path)
            down = load_faults(where).nvlink_fabric
            if down:
                text = _FABRIC_RE.sub(lambda m: f"{m.group(1)}{down}{m.group(2)}N/A", text)
        return text

    return nvidia_smi


# -- ib_write_bw ------------------------------------------------------------------------------
def _jitter(*keys: str) -> float:
    """A stable factor in [0.998, 1.0] so repeated runs print the same figures."""
    h = int.from_bytes(hashlib.sha256("|".join(keys).encode()).digest()[:4], "big")
    return 0.998 + 0.002 * (h / 2**32)


@dataclass
class _End:
    """What one side of a perftest run tells the other during the exchange."""

    node: str
    hca: str
    lid: int
    state: str
    rate_gbps: float
    rail_cap: float | None
    links: dict[str, float]
    cuda_error: str = ""


def hca_end(state: NodeHardware, faults: FabricFaults, hca: str, cuda_error: str = "") -> _End:
    h = state.hca(hca)
    return _End(
        node=state.node,
        hca=hca,
        lid=h.lid if h.state == "Active" else 0,
        state=h.state,
        rate_gbps=float(h.rate_gbps),
        rail_cap=faults.rails.get(hca),
        links=dict(faults.links),
        cuda_error=cuda_error,
    )


def pair_gbps(a: _End, b: _End) -> float:
    """The write bandwidth between two ends: the slower port, capped by either node's slow rail
    and by the path between exactly these two nodes."""
    gbps = min(a.rate_gbps, b.rate_gbps) * RDMA_EFFICIENCY
    for cap in (a.rail_cap, b.rail_cap, a.links.get(b.node), b.links.get(a.node)):
        if cap is not None:
            gbps = min(gbps, cap)
    x, y = sorted((f"{a.node}/{a.hca}", f"{b.node}/{b.hca}"))
    return gbps * _jitter(x, y)


def _perftest_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="ib_write_bw", add_help=True)
    ap.add_argument("--state")
    ap.add_argument("-d", "--ib-dev", dest="dev")
    ap.add_argument("-p", "--port", type=int, default=PERFTEST_PORT)
    ap.add_argument("-s", "--size", type=int, default=65536)
    ap.add_argument("-n", "--iters", type=int, default=5000)
    ap.add_argument("-q", "--qp", type=int, default=1)
    ap.add_argument("-F", "--CPU-freq", dest="cpu_freq", action="store_true")
    ap.add_argument("--report_gbits", action="store_true")
    ap.add_argument("--use_cuda", type=int)
    ap.add_argument("--use_cuda_dmabuf", action="store_true")
    ap.add_argument("host", nargs="?")
    args = ap.parse_args(argv)
    if args.use_cuda_dmabuf and args.use_cuda is None:
        raise FabricToolError(
            "CUDA DMA-BUF cannot be used without CUDA\n Parser function exited with Error", 1
        )
    return args


def _cuda_lines(
    state: NodeHardware, faults: FabricFaults, gpu: int, size: int, dmabuf: bool
) -> tuple[list[str], str]:
    """perftest's CUDA set-up lines, and the error that ends the run (or "")."""
    out = ["initializing CUDA"]
    if faults.nvlink_fabric:
        # no fabric manager on an NVSwitch board: CUDA reports CUDA_ERROR_SYSTEM_NOT_READY
        return [*out, "cuInit(0) returned 802"], "cuInit(0) returned 802"
    gpus = state.present_gpus
    if gpu >= len(gpus):
        return out, f"No such device ID ({gpu}) exists in system"
    out.append("Listing all CUDA devices in system:")
    out += [f"CUDA device {n}: PCIe address is {g.bus_id[9:11]}:00" for n, g in enumerate(gpus)]
    pid = 4000 + int(state.seed % 60000)
    addr = 0x7F0000000000 + gpu * 0x40000000
    out += [
        "",
        f"Picking device No. {gpu}",
        f"[pid = {pid}, dev = {gpu}] device name = [{PRODUCT_NAME}]",
        "creating CUDA Ctx",
        "making it the current CUDA Ctx",
        f"cuMemAlloc() of a {2 * size} bytes GPU buffer",
        f"allocated GPU buffer address at {addr:016x} pointer={hex(addr)}",
    ]
    if dmabuf:
        aligned = (2 * size + 0xFFFF) & ~0xFFFF
        out.append(
            f"using DMA-BUF for GPU buffer address at {hex(addr)} aligned at {hex(addr)} with aligned size {aligned}"  # noqa: E501 (the genuine line)
        )
    return out, ""


def _header(dev: str, server: bool, cuda: bool) -> list[str]:
    # perftest 4.5-0.17 (Debian 12): ctx_print_test_info for an RC write test over InfiniBand
    lines = [
        RULE,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {dev}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
    ]
    if not server:
        lines.append(" TX depth        : 128")
    lines += [
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        " Link type       : IB",
        f" Max inline data : {0 if cuda else 220}[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        RULE,
    ]
    return lines


def _addr(side: str, end: _End, seed: str) -> str:
    h = hashlib.sha256(seed.encode()).digest()
    qpn, psn = int.from_bytes(h[:2], "big") | 0x40, int.from_bytes(h[2:5], "big")
    rkey, vaddr = int.from_bytes(h[5:8], "big"), 0x7F0000000000 | int.from_bytes(h[8:12], "big") << 12
    return f" {side} address: LID {end.lid:#04x} QPN {qpn:#06x} PSN {psn:#06x} RKey {rkey:#08x} VAddr {vaddr:#016x}"  # noqa: E501 (the genuine line)


def _exchange(sock: socket.socket, mine: _End) -> _End:
    sock.sendall((json.dumps(asdict(mine)) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise FabricToolError(" Failed to exchange data between server and clients", 1)
        buf += chunk
    return _End(**json.loads(buf))


def ib_write_bw(argv: Sequence[str]) -> str:
    args = _perftest_args(argv)
    state, where = _load_state(args.state)
    faults = load_faults(where)
    dev = args.dev or (state.hcas[0].name if state.hcas else "")
    if dev not in {h.name for h in state.hcas}:
        raise FabricToolError(f"IB device {dev} not found\n Unable to find the Infiniband/RoCE device", 1)
    server = args.host is None
    out: list[str] = []
    if args.use_cuda is not None:
        out.append("Perftest doesn't supports CUDA tests with inline messages: inline size set to 0")
    if server:
        out += [
            "",
            "************************************",
            "* Waiting for client to connect... *",
            "************************************",
        ]
    cuda_error = ""
    if args.use_cuda is not None:
        lines, cuda_error = _cuda_lines(state, faults, args.use_cuda, args.size, args.use_cuda_dmabuf)
        out += lines
    mine = hca_end(state, faults, dev, cuda_error)
    sock = _connect(args) if not server else _accept(args)
    with sock:
        theirs = _exchange(sock, mine)
    if cuda_error:
        sys.stdout.write("\n".join(out) + "\n")
        raise FabricToolError(cuda_error if cuda_error.startswith("No such") else "", 1)
    out += _header(dev, server, args.use_cuda is not None)
    local_seed = f"{mine.node}/{mine.hca}/{args.port}"
    remote_seed = f"{theirs.node}/{theirs.hca}/{args.port}"
    out += [_addr("local", mine, local_seed), _addr("remote", theirs, remote_seed), RULE]
    if mine.state != "Active" or theirs.state != "Active" or theirs.cuda_error:
        sys.stdout.write("\n".join(out) + "\n")
        if theirs.cuda_error:
            raise FabricToolError(" Failed to exchange data between server and clients", 1)
        qpn = int.from_bytes(hashlib.sha256(local_seed.encode()).digest()[:2], "big") | 0x40
        raise FabricToolError(
            f"Failed to modify QP {qpn} to RTR\n Unable to Connect the HCA's through the link", 1
        )
    unit = "Gb/sec" if args.report_gbits else "MB/sec"
    out.append(f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
    if not server:
        gbps = pair_gbps(mine, theirs)
        value = gbps if args.report_gbits else gbps * 1e9 / 8 / 2**20
        peak = value * 1.0001
        rate = gbps * 1e9 / 8 / args.size / 1e6
        out.append(
            f" {args.size:<7d}    {args.iters:<10d}       {peak:<7.2f}            {value:<7.2f}\t\t   {rate:<7.6f}"  # noqa: E501 (the genuine line)
        )
    out.append(RULE)
    return "\n".join(out) + "\n"


def _connect(args: argparse.Namespace) -> socket.socket:
    try:
        return socket.create_connection((args.host, args.port), timeout=30)
    except OSError:
        raise FabricToolError(
            f"Couldn't connect to {args.host}:{args.port}\n Unable to init the socket connection", 1
        ) from None


def _accept(args: argparse.Namespace) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", args.port))
        listener.listen(1)
    except OSError:
        listener.close()
        raise FabricToolError(
            f"Couldn't listen to port {args.port}\n Unable to init the socket connection", 1
        ) from None
    with listener:
        conn, _ = listener.accept()
    return conn


# -- all_reduce_perf --------------------------------------------------------------------------
_SIZE_RE = re.compile(r"^(\d+)([KMG]?)$")
_HEAD = (
    "#                                                              out-of-place                       in-place          \n"  # noqa: E501 (the genuine line)
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"  # noqa: E501 (the genuine line)
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         "  # noqa: E501 (the genuine line)
)


def _size(text: str) -> int:
    m = _SIZE_RE.match(text.strip().upper())
    if not m:
        raise FabricToolError(f"invalid size specified for '{text}'", 1)
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def _float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals, fewer as the integer part grows."""
    power, val = 0, 1
    while value >= val:
        power, val = power + 1, val * 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def _expand(nodelist: str) -> list[str]:
    """Slurm's compressed host list (``gpu-[001-003,007],head``) -> names."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", nodelist):
        m = re.match(r"^(.*)\[([^\]]*)\](.*)$", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
    return out


def _node_plateau(state: NodeHardware) -> float:
    gpus = state.present_gpus
    if not gpus:
        return 0.0
    return NVLINK_BUSBW_GBS * min(sum(link.up for link in g.nvlinks) for g in gpus) / NVLINK_COUNT


def _rail_gbps(state: NodeHardware, faults: FabricFaults, hca: str) -> float:
    h = state.hca(hca)
    if h.state != "Active":
        return 0.0
    gbps = h.rate_gbps * RDMA_EFFICIENCY
    return min(gbps, faults.rails.get(hca, gbps))


def _ring_busbw(nodes: list[tuple[NodeHardware, FabricFaults]]) -> float:
    """Inter-node all-reduce: every ring step goes through one NIC per channel and the channels
    move in lockstep, so the slowest rail of the slowest neighbour pair sets the pace."""
    worst = math.inf
    for i, (a, fa) in enumerate(nodes):
        b, fb = nodes[(i + 1) % len(nodes)]
        rails = [h.name for h in a.hcas]
        slowest = min(
            min(
                _rail_gbps(a, fa, r),
                _rail_gbps(b, fb, r),
                fa.links.get(b.node, math.inf),
                fb.links.get(a.node, math.inf),
            )
            for r in rails
        )
        worst = min(worst, slowest * len(rails) / 8)  # Gb/s over all rails -> GB/s
    return worst * RING_EFFICIENCY


BOOTSTRAP_TIMEOUT = 120.0  # seconds rank 0 waits for the others (srun starts them together)


def bootstrap_address(names: Sequence[str]) -> tuple[str, int]:
    """Where rank 0 listens: its node (the step's first), on a port derived from the job and step
    (NCCL publishes an ephemeral one through MPI; the simulator has no MPI to publish it with).
    ``$HWSIM_BOOTSTRAP_HOST``/``$HWSIM_BOOTSTRAP_PORT`` override both (tests on one host), and
    ``$HWSIM_BOOTSTRAP_TIMEOUT`` the wait."""
    host = os.environ.get("HWSIM_BOOTSTRAP_HOST") or (names[0] if names else "")
    if not host:
        raise FabricToolError("no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: cannot find rank 0", 1)
    port = os.environ.get("HWSIM_BOOTSTRAP_PORT")
    if port:
        return host, int(port)
    job, step = int(os.environ.get("SLURM_JOB_ID") or 0), int(os.environ.get("SLURM_STEP_ID") or 0)
    return host, 40000 + (job * 16 + step) % 20000


def _bootstrap(
    rank: int, ntasks: int, names: Sequence[str], mine: tuple[NodeHardware, FabricFaults]
) -> list[tuple[NodeHardware, FabricFaults]]:
    """Rank 0 gathers every rank's hardware over TCP (returned in rank order); the others send
    theirs to it (returned: []). Fails, as NCCL's bootstrap does, when a rank never arrives."""
    host, port = bootstrap_address(names)
    payload = json.dumps({"rank": rank, "state": mine[0].to_dict(), "faults": asdict(mine[1])}) + "\n"
    wait = float(os.environ.get("HWSIM_BOOTSTRAP_TIMEOUT") or BOOTSTRAP_TIMEOUT)
    deadline = time.monotonic() + wait
    if rank != 0:
        while True:
            try:
                with socket.create_connection((host, port), timeout=10) as sock:
                    sock.sendall(payload.encode())
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(16)  # rank 0 closes once it has read the line
                return []
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise FabricToolError(
                        f"NCCL WARN Bootstrap : rank {rank} could not reach rank 0 at {host}:{port}: {exc}", 1
                    ) from None
                time.sleep(0.2)
    got: dict[int, tuple[NodeHardware, FabricFaults]] = {0: mine}
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("0.0.0.0", port))
        except OSError as exc:
            raise FabricToolError(
                f"NCCL WARN Bootstrap : rank 0 cannot listen on port {port}: {exc}", 1
            ) from None
        listener.listen(ntasks)
        while len(got) < ntasks:
            listener.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                missing = sorted(set(range(ntasks)) - set(got))
                raise FabricToolError(
                    f"NCCL WARN Bootstrap : ranks {missing} did not connect within {wait:g}s", 1
                ) from None
            with conn:
                conn.settimeout(30)
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                try:
                    data = json.loads(buf)
                    f = data["faults"]
                    got[int(data["rank"])] = (
                        NodeHardware.from_dict(data["state"]),
                        FabricFaults(f["rails"], f["links"], f["nvlink_fabric"]),
                    )
                except (ValueError, KeyError, TypeError):
                    continue  # not one of ours; keep waiting for the ranks
    return [got[r] for r in range(ntasks)]


def all_reduce_perf(argv: Sequence[str]) -> str:
    ap = argparse.ArgumentParser(prog="all_reduce_perf")
    ap.add_argument("--state")
    ap.add_argument("-b", "--minbytes", default="32M")
    ap.add_argument("-e", "--maxbytes", default="32M")
    ap.add_argument("-f", "--stepfactor", type=int, default=1)
    ap.add_argument("-g", "--ngpus", type=int, default=1)
    ap.add_argument("-t", "--nthreads", type=int, default=1)
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("-w", "--warmup_iters", type=int, default=5)
    ap.add_argument("-c", "--check", type=int, default=1)
    args = ap.parse_args(argv)
    lo, hi = _size(args.minbytes), _size(args.maxbytes)
    rank, ntasks = int(os.environ.get("SLURM_PROCID", "0")), int(os.environ.get("SLURM_NTASKS", "1"))
    names = _expand(os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", ""))
    state_dir = Path(os.environ.get("HWSIM_STATE_DIR") or state_file(args.state).resolve().parent)
    shared = "HWSIM_STATE_DIR" in os.environ or all(
        (state_dir / f"{n}.json").exists() for n in names[:ntasks]
    )
    if ntasks > 1 and not shared:
        # separate machines (the lab): the ranks meet over TCP, as NCCL's bootstrap does
        state, where = _load_state(args.state)
        members = _bootstrap(rank, ntasks, names, (state, load_faults(where)))
        if rank != 0:
            return ""
    elif rank != 0:
        return ""  # with MPI only rank 0 prints
    elif ntasks > 1:
        # rank 0 reports for the whole job: every node's state, from the shared state directory
        members = []
        for name in names[:ntasks]:
            path = state_dir / f"{name}.json"
            try:
                members.append((load(path), load_faults(path)))
            except (OSError, ValueError) as exc:
                raise FabricToolError(f"{name}: no simulated hardware state at {path}: {exc}", 1) from None
    else:
        state, where = _load_state(args.state)
        members = [(state, load_faults(where))]
    for st, ft in members:
        if ft.nvlink_fabric:
            return _fail(f"{st.node}: Test CUDA failure util.cu:555 'system not yet initialized'")
        if len(st.present_gpus) < args.ngpus:
            raise FabricToolError(
                f"Invalid number of GPUs: {args.ngpus} requested but only {len(st.present_gpus)} were found.\n"  # noqa: E501 (the genuine line)
                "Please check the number of processes and GPUs per process.",
                1,
            )
    plateau = min(_node_plateau(st) for st, _ in members)
    if len(members) > 1:
        plateau = min(plateau, _ring_busbw(members))
    nranks = len(members) * args.ngpus
    factor = 2 * (nranks - 1) / nranks if nranks > 1 else 1.0
    lines = [
        "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902",
        "# Collective test starting: all_reduce_perf",
        f"# nThread {args.nthreads} nGpus {args.ngpus} minBytes {lo} maxBytes {hi} step: "
        f"{args.stepfactor}(factor) warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: 1 "
        f"validation: {args.check} graph: 0",
        "#",
        "# Using devices",
    ]
    for p, (st, _) in enumerate(members):
        pid = 100000 + int(st.seed % 900000)
        for i, g in enumerate(st.present_gpus[: args.ngpus]):
            bus = int(g.bus_id[9:11], 16)
            lines.append(
                f"#  Rank {p * args.ngpus + i:2d} Group  0 Pid {pid:6d} on {st.node:>10s} device {i:2d} "
                f"[0000:{bus:02x}:00] {PRODUCT_NAME}"
            )
    lines += ["#", _HEAD]
    sizes, size, total = [], lo, 0.0
    while size <= hi:
        sizes.append(size)
        if args.stepfactor <= 1:
            break
        size *= args.stepfactor
    for size in sizes:
        busbw = plateau * size / (size + HALF_SIZE) if nranks > 1 else 0.0
        algbw = busbw / factor if factor else 0.0
        time_us = size / (algbw * 1e3) if algbw else 0.0
        row = f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
        for _ in range(2):
            row += f"  {_float_str(time_us, 7)}  {_float_str(algbw, 6)}  {_float_str(busbw, 6)}  {0:6d}"
            total += busbw
        lines.append(row)
    avg = total / (2 * len(sizes)) if sizes else 0.0
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {avg:g} ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
        "",
    ]
    return "\n".join(lines) + "\n"


def _fail(line: str) -> str:
    sys.stdout.write(line + "\n")
    raise FabricToolError("", 1)


TOOLS: dict[str, Callable[[Sequence[str]], str]] = {
    "ib_write_bw": ib_write_bw,
    "all_reduce_perf": all_reduce_perf,
    "fabric": fabric,
}
