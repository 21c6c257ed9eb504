"""The genuine samples a preflight sees, and mutated copies of them (a GPU gone, an H200 board),
as the outputs of ``opsctl.preflight.collect.commands`` would carry them."""

from __future__ import annotations

from pathlib import Path

from opsctl.evidence.ssh import CommandResult
from opsctl.parsers.ib_sysfs import parse_flattened

REPO = Path(__file__).resolve().parents[3]
REAL_WORLD = REPO / "tests" / "fixtures" / "real-world"
SAMPLES = REPO / "tests" / "unit" / "ansible" / "fixtures"
NVSMI = REAL_WORLD / "nvidia-smi-q.h100x8.535.183.01.gpud.txt"
IB_FLAT = REAL_WORLD / "sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt"
LSBLK = SAMPLES / "lsblk.bytes-paths.gpud.json"
NVME = SAMPLES / "nvme-list-o-json.azure-2ns.lisa.json"
IB_ROOT = "/sys/class/infiniband"


def h100_report() -> str:
    return NVSMI.read_text()


def as_h200(report: str) -> str:
    """The genuine H100 report with an H200's name and memory (141 GB HBM3e: 143771 MiB)."""
    return report.replace("NVIDIA H100 80GB HBM3", "NVIDIA H200").replace(": 81559 MiB", ": 143771 MiB")


def without_last_gpu(report: str) -> str:
    """The report as the driver prints it once a GPU has fallen off the bus."""
    head, _, _ = report.rpartition("\nGPU 0000")
    n = report.count("\nGPU 0000")
    return (
        head.replace(
            f"Attached GPUs                             : {n}",
            f"Attached GPUs                             : {n - 1}",
        )
        + "\n"
    )


def ib_files(**changes: str) -> dict[str, str]:
    files = parse_flattened(IB_FLAT.read_text())
    files.update(changes)
    return files


def ib_grep_output(files: dict[str, str], root: str = IB_ROOT) -> str:
    """What the preflight IB command prints for a tree: the root, then ``grep -sH .`` lines."""
    lines = [f"@root={root}"] + [f"{root}/{rel}:{value}" for rel, value in sorted(files.items())]
    return "\n".join(lines) + "\n"


def outputs(
    report: str | None = None,
    ib: dict[str, str] | None = None,
    pci_numa: dict[str, int] | None = None,
    nvme: bool = True,
) -> dict[str, CommandResult]:
    """The outputs of every preflight command on a node built from the genuine samples."""
    smi = CommandResult(0, h100_report() if report is None else report)
    pci = "".join(f"/sys/bus/pci/devices/{addr}/numa_node:{n}\n" for addr, n in (pci_numa or {}).items())
    return {
        "nvidia_smi": smi,
        "pci_numa": CommandResult(0, pci),
        "ib": CommandResult(0, ib_grep_output(ib_files() if ib is None else ib)),
        "lsblk": CommandResult(0, LSBLK.read_text()),
        "nvme": CommandResult(0, NVME.read_text()) if nvme else CommandResult(0, "@opsctl-no-nvme-cli\n"),
        "cpuinfo": CommandResult(0, (SAMPLES / "cpuinfo.gvisor-2vcpu.txt").read_text()),
        "meminfo": CommandResult(0, (SAMPLES / "meminfo.gvisor-24g.txt").read_text()),
        "numa_nodes": CommandResult(0, "has_cpu\nnode0\nnode1\nonline\n"),
        "dev": CommandResult(0, "null\nnvidia-nvswitch0\nnvidia-nvswitch1\nnvidia-nvswitchctl\nnvidia0\n"),
    }
