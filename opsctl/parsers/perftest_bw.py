"""Parser for the text output of perftest's bandwidth tests (``ib_write_bw``, ``ib_read_bw``,
``ib_send_bw``), perftest 4.4 to 26.x: Debian 12 ships 4.5-0.17 (``--version`` prints 6.06).

Layout (one run, client or server side)::

    ---------------------------------------------------------------------------------------
                        RDMA_Write BW Test
     Dual-port       : OFF          Device         : mlx5_0
     Number of qps   : 1            Transport type : IB
     ...
     Link type       : IB
    ---------------------------------------------------------------------------------------
     local address: LID 0x01 QPN 0x004a PSN 0xbe352e RKey 0x1fff00 VAddr 0x007e6f4ed11000
     remote address: LID 0x02 QPN 0x0049 PSN 0x4601da RKey 0x1fff00 VAddr 0x007778e64eb000
    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             392.38             392.34               0.748336
    ---------------------------------------------------------------------------------------

Quirks handled: two ``Key : value`` pairs on one line (tab separated); warnings printed between
the header and the rows (``Conflicting CPU frequency values detected ...``); the unit is
``Gb/sec`` with ``--report_gbits``, else ``MB/sec`` (4.x) or ``MiB/sec`` (25.x+), both 2^20
bytes; a write test's server prints the header and no row; ``--use_cuda`` adds CUDA lines before
the header (``Picking device No. N``); lines may be indented (documentation copies).

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RULE_RE = re.compile(r"^-{20,}$")
_TITLE_RE = re.compile(r"^((?:RDMA_Write|RDMA_Read|Send|Atomic)\b.*\bTest)$")
_UNIT_RE = re.compile(r"BW average\[(Gb|MB|MiB)/sec\]")
_ADDR_RE = re.compile(r"^(local|remote) address: LID (0x[0-9a-fA-F]+|\d+)\b")
_ROW_RE = re.compile(r"^(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
# Two settings share a line, split by tabs (or by a run of spaces in copies that expanded them).
_PAIR_SPLIT_RE = re.compile(r"\t+(?=[A-Za-z])|\s{2,}(?=[A-Z][\w .*\-]*?\s*:\s)")
_SETTING_RE = re.compile(r"^[A-Za-z][\w .*\-]*?\s*:\s")
_CUDA_PICK_RE = re.compile(r"^Picking device No\. (\d+)")
_CUDA_NAME_RE = re.compile(r"device name = \[([^\]]*)\]")
# Lines that mean the run did not measure (perftest prints them on stderr, often merged).
_ERROR_MARKERS = (
    "Couldn't",
    "Unable to",
    "Failed to",
    "Did not detect devices",
    "No such device",
    "IB device",
    "Parser function exited with Error",
)


@dataclass
class BwRow:
    size_bytes: int
    iterations: int
    bw_peak: float
    bw_average: float
    msg_rate_mpps: float


@dataclass
class PerftestReport:
    test: str = ""  # "RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test", ...
    settings: dict[str, str] = field(default_factory=dict)  # "Device": "mlx5_0", "Link type": "IB"
    unit: str = ""  # "Gb", "MB" or "MiB" (per second)
    local_lid: int | None = None
    remote_lid: int | None = None
    cuda_device: int | None = None  # --use_cuda: the GPU picked
    cuda_device_name: str = ""
    rows: list[BwRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # "Conflicting CPU frequency ...", ...
    errors: list[str] = field(default_factory=list)

    @property
    def device(self) -> str:
        return self.settings.get("Device", "")

    @property
    def link_type(self) -> str:
        return self.settings.get("Link type", "")

    def gbps(self, value: float) -> float:
        """A bandwidth figure of this report in Gb/s (MB and MiB are 2^20 bytes in perftest)."""
        return value if self.unit == "Gb" else value * 2**20 * 8 / 1e9

    def average_gbps(self) -> float | None:
        """BW average of the largest message size, in Gb/s; None when no row was printed."""
        if not self.rows:
            return None
        return self.gbps(max(self.rows, key=lambda r: r.size_bytes).bw_average)


def _lid(text: str) -> int:
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def parse_perftest_bw(text: str) -> PerftestReport:
    r = PerftestReport()
    in_rows = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _RULE_RE.match(line):
            continue
        m = _TITLE_RE.match(line)
        if m and not r.test:
            r.test = m.group(1)
            continue
        m = _UNIT_RE.search(line)
        if m:
            r.unit = m.group(1)
            in_rows = True
            continue
        m = _ADDR_RE.match(line)
        if m:
            if m.group(1) == "local":
                r.local_lid = _lid(m.group(2))
            else:
                r.remote_lid = _lid(m.group(2))
            continue
        m = _ROW_RE.match(line)
        if m and in_rows:
            size, iters, peak, avg, rate = m.groups()
            r.rows.append(BwRow(int(size), int(iters), float(peak), float(avg), float(rate)))
            continue
        m = _CUDA_PICK_RE.match(line)
        if m:
            r.cuda_device = int(m.group(1))
            continue
        m = _CUDA_NAME_RE.search(line)
        if m:
            r.cuda_device_name = m.group(1)
            continue
        if line.startswith(_ERROR_MARKERS):
            r.errors.append(line)
            continue
        if r.test and not r.unit and _SETTING_RE.match(line) and not line.startswith(("GID", "CUDA device")):
            for part in _PAIR_SPLIT_RE.split(line):
                key, sep, value = part.partition(":")
                if sep and key.strip():
                    r.settings.setdefault(key.strip(), value.strip())
            continue
        if line.startswith(("Conflicting", "WARNING")) or (in_rows and not line.startswith("#")):
            r.warnings.append(line)
    return r
