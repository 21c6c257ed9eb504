"""Parser for ``nvidia-smi nvlink -s`` (per-GPU link speeds) and ``dcgmi nvlink --link-status``.

``nvidia-smi nvlink -s`` prints ``GPU N: NAME (UUID: ...)`` then ``Link L: 26.562 GB/s`` per link;
a link that is down prints ``Link L: <inactive>``, and a GPU whose links are all down prints
``NVML: Unable to retrieve NVLink information as all links are inactive`` instead of links.
``dcgmi nvlink --link-status`` prints one row of U/D/X/_ (up, down, disabled, unsupported) per GPU.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GPU_RE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_LINK_RE = re.compile(r"^Link (\d+): (.*)$")
_SPEED_RE = re.compile(r"^([\d.]+)\s*GB/s")
_DCGMI_GPU_RE = re.compile(r"^gpuId (\d+):\s*$")
_DCGMI_ROW_RE = re.compile(r"^([UDX_](?: [UDX_])*)\s*$")


@dataclass
class NvlinkGpu:
    index: int
    name: str = ""
    uuid: str = ""
    links: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s, None = inactive
    all_inactive: bool = False

    @property
    def links_up(self) -> int:
        return sum(1 for v in self.links.values() if v)

    @property
    def links_down(self) -> int:
        return sum(1 for v in self.links.values() if not v)


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    gpus: list[NvlinkGpu] = []
    gpu: NvlinkGpu | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = _GPU_RE.match(line)
        if m:
            gpu = NvlinkGpu(index=int(m.group(1)), name=m.group(2), uuid=m.group(3) or "")
            gpus.append(gpu)
            continue
        if gpu is None:
            continue
        if "all links are inactive" in line:
            gpu.all_inactive = True
            continue
        m = _LINK_RE.match(line)
        if m:
            s = _SPEED_RE.match(m.group(2).strip())
            gpu.links[int(m.group(1))] = float(s.group(1)) if s else None
    return gpus


@dataclass
class DcgmiLinkStatus:
    gpus: dict[int, list[str]] = field(default_factory=dict)  # gpuId -> ["U", "D", ...]

    def down(self, gpu: int) -> int:
        return sum(1 for s in self.gpus.get(gpu, []) if s == "D")


def parse_dcgmi_link_status(text: str) -> DcgmiLinkStatus:
    out = DcgmiLinkStatus()
    current: int | None = None
    in_gpus = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("GPUs:"):
            in_gpus = True
            continue
        if line.startswith(("NvSwitches:", "Key:")):
            in_gpus = False
            current = None
            continue
        if not in_gpus:
            continue
        m = _DCGMI_GPU_RE.match(line)
        if m:
            current = int(m.group(1))
            continue
        m = _DCGMI_ROW_RE.match(line)
        if m and current is not None:
            out.gpus[current] = m.group(1).split()
    return out
