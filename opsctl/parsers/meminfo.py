"""Parser for Linux ``/proc/meminfo``.

Lines are ``Name:   value kB`` (a few, such as ``HugePages_Total``, have no unit: they are counts).
Every field is kept in :attr:`MemInfo.fields` (kB values in KiB, counts as counts); the fields
Slurm and preflight use have their own attributes.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemInfo:
    total_kib: int
    available_kib: int | None = None
    free_kib: int | None = None
    swap_total_kib: int | None = None
    hugepages_total: int | None = None
    hugepage_size_kib: int | None = None
    fields: dict[str, int] = field(default_factory=dict)

    @property
    def total_mib(self) -> int:
        return self.total_kib // 1024


def parse_meminfo(text: str) -> MemInfo:
    """All fields; ValueError when ``MemTotal`` is missing."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            values[name.strip()] = int(parts[0])
        except ValueError:
            continue
    if "MemTotal" not in values:
        raise ValueError("meminfo: no MemTotal")
    return MemInfo(
        total_kib=values["MemTotal"],
        available_kib=values.get("MemAvailable"),
        free_kib=values.get("MemFree"),
        swap_total_kib=values.get("SwapTotal"),
        hugepages_total=values.get("HugePages_Total"),
        hugepage_size_kib=values.get("Hugepagesize"),
        fields=values,
    )
