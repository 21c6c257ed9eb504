"""cpuinfo and meminfo parsers on recorded /proc files."""

from __future__ import annotations

import pytest
from provisioning_helpers import sample

from opsctl.parsers.cpuinfo import parse_cpuinfo
from opsctl.parsers.meminfo import parse_meminfo


def test_cpuinfo_of_a_two_vcpu_guest():
    cpu = parse_cpuinfo(sample("cpuinfo.gvisor-2vcpu.txt"))
    assert cpu.logical_cpus == 2
    assert (cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (1, 2, 1)
    assert cpu.topology_from_ids
    assert cpu.model_name == "Intel(R) Xeon(R) Processor"
    assert cpu.vendor == "GenuineIntel"
    assert "avx512f" in cpu.flags and "amx_tile" in cpu.flags


def _x86_block(proc: int, socket: int, core: int) -> str:
    return (
        f"processor\t: {proc}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        f"physical id\t: {socket}\nsiblings\t: 4\ncore id\t\t: {core}\ncpu cores\t: 2\n\n"
    )


def test_cpuinfo_two_sockets_with_hyperthreads():
    # 2 sockets x 2 cores x 2 threads, in the kernel's order (all first threads, then siblings)
    blocks = [_x86_block(p, (p // 2) % 2, p % 2) for p in range(8)]
    cpu = parse_cpuinfo("".join(blocks))
    assert (cpu.logical_cpus, cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (8, 2, 2, 2)
    assert cpu.cores == 4


def test_cpuinfo_without_topology_ids_falls_back_to_one_socket():
    text = (
        "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n\n"
        "processor\t: 1\nCPU part\t: 0xd4f\n"
    )
    cpu = parse_cpuinfo(text)
    assert (cpu.logical_cpus, cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 1, 2, 1)
    assert not cpu.topology_from_ids
    assert cpu.model_name == "0xd4f"


def test_cpuinfo_rejects_empty_input():
    with pytest.raises(ValueError, match="no processor"):
        parse_cpuinfo("")


def test_meminfo_of_a_24g_guest():
    mem = parse_meminfo(sample("meminfo.gvisor-24g.txt"))
    assert mem.total_kib == 24683584
    assert mem.total_mib == 24105
    assert mem.available_kib is not None and 0 < mem.available_kib <= mem.total_kib
    assert mem.hugepage_size_kib == 2048
    assert "Cached" in mem.fields


def test_meminfo_rejects_input_without_memtotal():
    with pytest.raises(ValueError, match="MemTotal"):
        parse_meminfo("MemFree: 10 kB\n")
