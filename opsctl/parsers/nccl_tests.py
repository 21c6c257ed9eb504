"""Parser for the text output of NVIDIA nccl-tests (``all_reduce_perf`` and its siblings),
nccl-tests 2.x: before 2.17 (no version line) and 2.17+ (``# nccl-tests version``,
``# Collective test starting/concluded``).

One run prints a header (``# nThread 1 nGpus 8 minBytes ...``), one ``#  Rank ...`` line per
GPU, a two-line column header, one row per message size::

        size   count  type redop root | out-of-place: time algbw busbw #wrong | in-place: ...
    33554432 4194304 double  sum   -1    182.87 183.49 321.10      0   182.88 183.48 321.08      0

and a footer (``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth    : 437.957``). Bandwidths
are GB/s (10^9 bytes). ``#wrong`` is ``N/A`` where the test does not check. Several runs
concatenated in one file (a sweep of collectives) are returned in order. A failing run prints
``<host>: Test CUDA failure common.cu:NNN '...'`` or ``Test NCCL failure`` lines instead.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VERSION_RE = re.compile(r"^# nccl-tests version (\S+)")
_STARTING_RE = re.compile(r"^# Collective test starting: (\S+)")
_PARAMS_RE = re.compile(r"^#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_RANK_RE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.*)$"
)
_ROW_RE = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    r"\s+([\d.e+]+)\s+([\d.e+]+)\s+([\d.e+]+)\s+(\S+)"
    r"\s+([\d.e+]+)\s+([\d.e+]+)\s+([\d.e+]+)\s+(\S+)"
)
_OOB_RE = re.compile(r"^# Out of bounds values\s*:\s*(\d+)")
_AVG_RE = re.compile(r"^# Avg bus bandwidth\s*:\s*([\d.e+]+)")
_FAILURE_RE = re.compile(r"Test (?:CUDA|NCCL) failure|Test failure|NCCL WARN|Error|error:")


@dataclass
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None  # None: N/A
    in_time_us: float
    in_algbw_gbs: float
    in_busbw_gbs: float
    in_wrong: int | None


@dataclass
class NcclRank:
    rank: int
    pid: int
    host: str
    device: int
    bus: str
    name: str


@dataclass
class NcclTestReport:
    collective: str = ""  # "all_reduce_perf" (2.17+ only)
    version: str = ""  # "2.17.8" (2.17+ only)
    n_threads: int | None = None
    n_gpus: int | None = None  # GPUs per process (-g)
    min_bytes: int | None = None
    max_bytes: int | None = None
    ranks: list[NcclRank] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw_gbs: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks})

    @property
    def complete(self) -> bool:
        """The run printed its footer (it did not die part way)."""
        return self.avg_busbw_gbs is not None

    def busbw_at_largest(self) -> float | None:
        """Out-of-place bus bandwidth of the largest message size (the plateau), GB/s."""
        if not self.rows:
            return None
        return max(self.rows, key=lambda r: r.size_bytes).busbw_gbs

    def wrong_total(self) -> int:
        return sum((r.wrong or 0) + (r.in_wrong or 0) for r in self.rows)


def _wrong(text: str) -> int | None:
    if text == "N/A":
        return None
    return int(float(text))


def parse_nccl_tests(text: str) -> list[NcclTestReport]:
    """Every run in ``text``, in order (an empty list when nothing looks like nccl-tests)."""
    reports: list[NcclTestReport] = []
    cur: NcclTestReport | None = None

    def start() -> NcclTestReport:
        rep = NcclTestReport()
        reports.append(rep)
        return rep

    for raw in text.splitlines():
        line = raw.rstrip()
        m = _VERSION_RE.match(line)
        if m:
            cur = start()
            cur.version = m.group(1)
            continue
        m = _STARTING_RE.match(line)
        if m:
            if cur is None or cur.collective or cur.n_gpus is not None:
                cur = start()
            cur.collective = m.group(1)
            continue
        m = _PARAMS_RE.match(line)
        if m:
            # a pre-2.17 run starts here; a 2.17+ run had its version line first
            if cur is None or cur.n_gpus is not None:
                cur = start()
            cur.n_threads, cur.n_gpus, cur.min_bytes, cur.max_bytes = (int(g) for g in m.groups())
            continue
        if cur is None:
            if _FAILURE_RE.search(line):
                cur = start()
                cur.failures.append(line.strip())
            continue
        m = _RANK_RE.match(line)
        if m:
            rank, pid, host, dev, bus, name = m.groups()
            cur.ranks.append(NcclRank(int(rank), int(pid), host, int(dev), bus, name.strip()))
            continue
        m = _ROW_RE.match(line)
        if m and not line.lstrip().startswith("#"):
            g = m.groups()
            cur.rows.append(
                NcclRow(
                    int(g[0]), int(g[1]), g[2], g[3], int(g[4]),
                    float(g[5]), float(g[6]), float(g[7]), _wrong(g[8]),
                    float(g[9]), float(g[10]), float(g[11]), _wrong(g[12]),
                )
            )  # fmt: skip
            continue
        m = _OOB_RE.match(line)
        if m:
            cur.out_of_bounds = int(m.group(1))
            continue
        m = _AVG_RE.match(line)
        if m:
            cur.avg_busbw_gbs = float(m.group(1))
            continue
        if not line.startswith("#") and _FAILURE_RE.search(line):
            cur.failures.append(line.strip())
    return reports
