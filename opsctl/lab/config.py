"""Lab layout: which machines exist, their addresses, and where state and caches live."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from opsctl.errors import UsageError

DEFAULT_SUBNET = "10.213.0.0/24"
DEFAULT_BRIDGE = "labbr0"
DEFAULT_CACHE = "/var/cache/opsctl-lab"
DEFAULT_STATE = "/var/lib/opsctl-lab"
HEAD_NAME = "head-01"  # as in production; a host named like its group confuses Ansible
MAX_GPU_NODES = 64
# Host .1, head .10, GPU nodes .11 upwards.
HEAD_OFFSET = 10
GPU_OFFSET = 11


@dataclass(frozen=True)
class Machine:
    name: str
    address: str  # dotted quad, no prefix
    role: str  # "head" or "gpu"


@dataclass(frozen=True)
class LabConfig:
    gpu_nodes: int = 3
    subnet: str = DEFAULT_SUBNET
    bridge: str = DEFAULT_BRIDGE
    cache_dir: Path = field(default_factory=lambda: Path(DEFAULT_CACHE))
    state_dir: Path = field(default_factory=lambda: Path(DEFAULT_STATE))
    suite: str = "bookworm"
    mirror: str = "http://deb.debian.org/debian"

    def __post_init__(self) -> None:
        if not 1 <= self.gpu_nodes <= MAX_GPU_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_GPU_NODES}, got {self.gpu_nodes}")
        try:
            net = ipaddress.IPv4Network(self.subnet)
        except ValueError as exc:
            raise UsageError(f"invalid lab subnet {self.subnet!r}: {exc}") from None
        if net.num_addresses < GPU_OFFSET + self.gpu_nodes + 1:
            raise UsageError(f"lab subnet {self.subnet} is too small for {self.gpu_nodes} GPU nodes")
        if not self.bridge or len(self.bridge) > 15 or not self.bridge.replace("-", "").isalnum():
            raise UsageError(f"invalid bridge name {self.bridge!r} (1-15 letters, digits or '-')")

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    @property
    def host_address(self) -> str:
        return str(self.network.network_address + 1)

    def gpu_name(self, index: int) -> str:
        return f"gpu-{index:03d}"

    @property
    def machines(self) -> list[Machine]:
        base = self.network.network_address
        out = [Machine(HEAD_NAME, str(base + HEAD_OFFSET), "head")]
        for i in range(1, self.gpu_nodes + 1):
            out.append(Machine(self.gpu_name(i), str(base + GPU_OFFSET + i - 1), "gpu"))
        return out

    @property
    def head(self) -> Machine:
        return self.machines[0]

    @property
    def gpu_machines(self) -> list[Machine]:
        return [m for m in self.machines if m.role == "gpu"]

    def machine(self, name: str) -> Machine:
        for m in self.machines:
            if m.name == name:
                return m
        raise UsageError(f"no lab machine named {name!r} (have: {', '.join(m.name for m in self.machines)})")

    # Paths under the state directory.
    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def shared_dir(self) -> Path:
        return self.state_dir / "shared"

    def machine_dir(self, name: str) -> Path:
        return self.state_dir / "machines" / name

    def upper_dir(self, name: str) -> Path:
        return self.machine_dir(name) / "upper"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "lab.json"


def from_env(gpu_nodes: int | None = None) -> LabConfig:
    """Build the config from $OPSCTL_LAB_* so that CLI, tests and bench agree on paths."""
    kwargs: dict[str, object] = {}
    if gpu_nodes is not None:
        kwargs["gpu_nodes"] = gpu_nodes
    env = os.environ
    if env.get("OPSCTL_LAB_SUBNET"):
        kwargs["subnet"] = env["OPSCTL_LAB_SUBNET"]
    if env.get("OPSCTL_LAB_BRIDGE"):
        kwargs["bridge"] = env["OPSCTL_LAB_BRIDGE"]
    if env.get("OPSCTL_LAB_CACHE"):
        kwargs["cache_dir"] = Path(env["OPSCTL_LAB_CACHE"])
    if env.get("OPSCTL_LAB_STATE"):
        kwargs["state_dir"] = Path(env["OPSCTL_LAB_STATE"])
    if env.get("OPSCTL_LAB_MIRROR"):
        kwargs["mirror"] = env["OPSCTL_LAB_MIRROR"]
    return LabConfig(**kwargs)  # type: ignore[arg-type]
