"""Per-process figures for the benches, from /proc (no psutil in the venv): CPU seconds, RSS, and
the least-squares line the soak's "no growth" condition is judged on. Pure parsing and arithmetic
are separate from the /proc reads so they can be unit-tested on fixed text.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse_stat_cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks) from the text of /proc/PID/stat. The command name (field 2) may
    hold spaces and parentheses, so fields are counted after its last ')'."""
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])  # fields 14 and 15 overall


def parse_status_rss_kib(status: str) -> int:
    """VmRSS (KiB) from the text of /proc/PID/status; 0 for a kernel thread or a zombie."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) ``pid`` has used so far; None once it is gone."""
    try:
        return parse_stat_cpu_ticks(Path(f"/proc/{pid}/stat").read_text()) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def rss_kib(pid: int) -> int | None:
    try:
        return parse_status_rss_kib(Path(f"/proc/{pid}/status").read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Line:
    slope: float
    intercept: float


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Line:
    """Ordinary least squares y = slope * x + intercept; needs two distinct xs."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    n = len(xs)
    mx, my = sum(xs) / n if n else 0.0, sum(ys) / n if n else 0.0
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        raise ValueError("a line needs at least two distinct x values")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return Line(slope, my - slope * mx)
