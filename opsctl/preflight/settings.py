"""The ``[preflight]`` section of opsctl.toml: the hardware profile every node must have (the keys
of the inventory's ``hw_expected``), and how to reach the nodes. Defaults: the production 8x H200
node with eight 400 Gb/s HCAs (inventory/production/group_vars/gpu_nodes.yml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opsctl.address import check_absolute, check_addresses


def _production_hcas() -> list[str]:
    return [f"mlx5_{i}" for i in range(8)]


@dataclass
class PreflightSection:
    gpu_count: int = 8
    gpu_model_substring: str = "H200"  # "" : any model
    gpu_memory_mib_min: int = 140000  # 0: no minimum
    ib_hcas: list[str] = field(default_factory=_production_hcas)  # []: no InfiniBand expected
    ib_rate_gbps: float = 400.0  # 0: no minimum
    nvme_data_min: int = 1  # data (non-system) NVMe drives
    slurm_gres: bool = True  # compare each node's GRES in Slurm with what was found
    nodes: str | None = None  # default node set (else [health] nodes, else every Slurm node)
    # node -> "host" or "host:port", over [health] ssh_addresses (where a node name does not resolve)
    addresses: dict[str, str] = field(default_factory=dict)
    # where the InfiniBand sysfs tree is when not /sys/class/infiniband (else [health] ib_sysfs_root;
    # $OPSCTL_IB_SYSFS_ROOT on the node still wins, as for `opsctl health --source ssh`)
    ib_sysfs_root: str | None = None

    def validate(self) -> None:
        for key in ("gpu_count", "gpu_memory_mib_min", "nvme_data_min"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0 (got {getattr(self, key)})")
        if self.ib_rate_gbps < 0:
            raise ValueError(f"ib_rate_gbps: must be >= 0 (got {self.ib_rate_gbps})")
        check_absolute("ib_sysfs_root", self.ib_sysfs_root)
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
