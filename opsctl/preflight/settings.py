"""The ``[preflight]`` section of opsctl.toml: the hardware profile every node must have (the keys
of the inventory's ``hw_expected``), and how to reach the nodes. Defaults: the production 8x H200
node with eight 400 Gb/s HCAs (inventory/production/group_vars/gpu_nodes.yml)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opsctl.address import check_absolute, check_addresses
from opsctl.config import check_fields, limits

# `nvidia-smi topo -m` link kinds, closest first
PAIRING_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _production_hcas() -> list[str]:
    return [f"mlx5_{i}" for i in range(8)]


@dataclass
class PreflightSection:
    gpu_count: int = field(default=8, metadata=limits(ge=0))  # GPUs each node must show
    gpu_model_substring: str = "H200"  # "" : any model
    gpu_memory_mib_min: int = field(default=140000, metadata=limits(ge=0))  # 0: no minimum
    ib_hcas: list[str] = field(default_factory=_production_hcas)  # []: no InfiniBand expected
    ib_rate_gbps: float = field(default=400.0, metadata=limits(ge=0))  # 0: no minimum
    nvme_data_min: int = field(default=1, metadata=limits(ge=0))  # data (non-system) NVMe drives
    slurm_gres: bool = True  # compare each node's GRES in Slurm with what was found
    nodes: str | None = None  # default node set (else [health] nodes, else every Slurm node)
    # node -> "host" or "host:port", over [health] ssh_addresses (where a node name does not resolve)
    addresses: dict[str, str] = field(default_factory=dict)
    # where the InfiniBand sysfs tree is when not /sys/class/infiniband (else [health] ib_sysfs_root;
    # $OPSCTL_IB_SYSFS_ROOT on the node still wins, as for `opsctl health --source ssh`)
    ib_sysfs_root: str | None = None

    # -- --fabric (docs/fabric.md): per-node fabric state, pair bandwidth, NCCL ---------------
    fabric_rate_detail: str = "4X NDR"  # the width and speed sysfs names in `rate` ("": any)
    fabric_link_layer: str = "InfiniBand"  # the link layer every fabric port must report
    fabric_pkey: str = "0xffff"  # a P_Key every port must hold ("": not judged)
    # NVSwitch devices of an HGX H200 8-GPU board (0: not judged)
    fabric_nvswitches: int = field(default=4, metadata=limits(ge=0))
    # GPU-to-HCA pairing from `nvidia-smi topo -m`: the closest link a GPU's HCA may be
    # PIX or PXB: same PCIe switch tree
    fabric_pairing_link: str = field(default="PXB", metadata=limits(choices=PAIRING_LINKS))
    # dcgmi diag -r N on idle nodes (0: not run; 2-3: longer)
    fabric_dcgm_level: int = field(default=1, metadata=limits(ge=0, le=3))
    fabric_rail_gbps_min: float = field(default=360.0, metadata=limits(ge=0))  # ib_write_bw per HCA, Gb/s
    fabric_gpudirect: bool = True  # --use_cuda=<GPU next to the HCA> --use_cuda_dmabuf
    fabric_msg_bytes: int = field(default=1048576, metadata=limits(gt=0))  # ib_write_bw message size
    fabric_iterations: int = field(default=5000, metadata=limits(gt=0))  # ib_write_bw iterations per rail
    # perftest's default port; pair i of a round, rail j: +i*rails+j
    fabric_port_base: int = field(default=18515, metadata=limits(ge=1024, le=60000))
    # distinct partners per node in the first rounds
    fabric_partners: int = field(default=2, metadata=limits(gt=0))
    # known-good partners a suspect of a failing pair meets
    fabric_retest_partners: int = field(default=2, metadata=limits(ge=0))
    # seconds for one pair's eight rails
    fabric_pair_timeout: float = field(default=120.0, metadata=limits(gt=0))
    # all_reduce_perf on one node (8x H200), GB/s
    fabric_nccl_busbw_min: float = field(default=431.0, metadata=limits(ge=0))
    # all_reduce_perf across the set, GB/s
    fabric_nccl_multinode_busbw_min: float = field(default=340.0, metadata=limits(ge=0))
    fabric_nccl_min_bytes: str = "1G"  # all_reduce_perf -b: the smallest message
    fabric_nccl_max_bytes: str = "8G"  # all_reduce_perf -e: the largest, whose bus bandwidth is judged
    fabric_nccl_multinode: bool = True  # one all_reduce_perf over every node, through srun
    # extra srun arguments for the multi-node all_reduce_perf (its MPI launch)
    fabric_srun_args: list[str] = field(default_factory=lambda: ["--mpi=pmix"])
    # seconds per all_reduce_perf run
    fabric_nccl_timeout: float = field(default=600.0, metadata=limits(gt=0))

    def validate(self) -> None:
        check_fields(self)
        check_absolute("ib_sysfs_root", self.ib_sysfs_root)
        self._validate_fabric()
        check_addresses("addresses", self.addresses)

    def expected(self) -> dict[str, Any]:
        """The profile as the hw_facts module's ``expected`` takes it (hw_expected's keys); a zero
        or empty value leaves that expectation out."""
        out: dict[str, Any] = {"gpu_count": self.gpu_count, "nvme_data_min": self.nvme_data_min}
        if self.gpu_model_substring:
            out["gpu_model_substring"] = self.gpu_model_substring
        if self.gpu_memory_mib_min:
            out["gpu_memory_mib_min"] = self.gpu_memory_mib_min
        if self.ib_hcas:
            out["ib_hcas"] = list(self.ib_hcas)
            if self.ib_rate_gbps:
                rate = self.ib_rate_gbps
                out["ib_rate_gbps"] = int(rate) if rate == int(rate) else rate
        return out

    def _validate_fabric(self) -> None:
        if self.fabric_pkey and not re.fullmatch(r"0x[0-9a-fA-F]{1,4}", self.fabric_pkey):
            raise ValueError(f"fabric_pkey: a 16-bit hex P_Key such as 0xffff (got {self.fabric_pkey!r})")
        for key in ("fabric_nccl_min_bytes", "fabric_nccl_max_bytes"):
            if not re.fullmatch(r"\d+[KMG]?", getattr(self, key)):
                raise ValueError(f"{key}: a size such as 1G, 512M or 8 (got {getattr(self, key)!r})")
