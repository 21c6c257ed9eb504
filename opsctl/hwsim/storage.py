"""The mounts of a simulated GPU node as node_exporter's filesystem and nfs collectors report them.

The layout is the production inventory's: the root file system and the job scratch array on local
NVMe, /home and /shared over NFS from the storage node, the Lustre scratch file system over o2ib.
Sizes and usage are fixed per node (seeded by its name); the shared file systems show the same
numbers on every node, as they do on a real cluster. The NFS client's RPC counters grow at a steady
rate since boot.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from opsctl.hwsim.state import NodeHardware

TIB = 1 << 40
NFS_RPCS_PER_S = 40.0  # a node's steady NFS client traffic (home directories, shared software)


@dataclass(frozen=True)
class Mount:
    device: str
    fstype: str
    mountpoint: str
    size_bytes: int
    used_share: float
    files: int
    shared: bool  # the same file system on every node


MOUNTS = (
    Mount("/dev/nvme0n1p2", "ext4", "/", int(1.7 * TIB), 0.18, 114_163_712, False),
    Mount("/dev/md0", "xfs", "/scratch", int(27.9 * TIB), 0.07, 2_995_687_360, False),
    Mount("storage-01:/srv/nfs/home", "nfs4", "/home", 60 * TIB, 0.41, 1_932_735_283, True),
    Mount("storage-01:/srv/nfs/shared", "nfs4", "/shared", 120 * TIB, 0.63, 3_865_470_566, True),
    Mount("10.30.0.200@o2ib:/scratch", "lustre", "/lustre/scratch", 2048 * TIB, 0.52, 4_294_967_296, True),
)


@dataclass(frozen=True)
class FsStats:
    mount: Mount
    avail_bytes: int
    free_bytes: int
    files_free: int


def filesystems(state: NodeHardware) -> list[FsStats]:
    """statfs() of each mount: a local file system's usage varies a little from node to node."""
    rng = random.Random(state.seed ^ 0x5F5)
    out = []
    for m in MOUNTS:
        share = m.used_share if m.shared else min(0.95, m.used_share + rng.uniform(-0.05, 0.05))
        free = int(m.size_bytes * (1 - share))
        reserved = int(m.size_bytes * 0.05) if m.fstype == "ext4" else 0  # ext4's root reserve
        files_free = int(m.files * (1 - share / 2))
        out.append(FsStats(m, max(0, free - reserved), free, files_free))
    return out


def nfs_rpcs(state: NodeHardware, now: float) -> int:
    return int(max(0.0, now - state.boot_time) * NFS_RPCS_PER_S)
