"""Parser for ``perfquery`` output (infiniband-diags): ``-x`` extended counters, ``-E`` receive
error details, and the plain PMA counters. Each block starts with a ``# ... counters: Lid L port P``
comment line, then ``Name:.....value`` lines (dots pad the name to a column).

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER_RE = re.compile(r"^#\s*(.*?)\s*counters:\s*Lid\s+(\d+)\s+port\s+(\d+|all|255)", re.IGNORECASE)
_LINE_RE = re.compile(r"^([A-Za-z0-9_]+):\.*\s*(\S+)\s*$")


@dataclass
class PerfqueryBlock:
    kind: str  # "Port extended", "PortRcvErrorDetails", "Port", ...
    lid: int
    port: str  # a number, or "all"/"255" for an aggregated query
    counters: dict[str, int] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)  # non-counter fields (masks, selectors)


def parse_perfquery(text: str) -> list[PerfqueryBlock]:
    blocks: list[PerfqueryBlock] = []
    block: PerfqueryBlock | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _HEADER_RE.match(line)
        if m:
            block = PerfqueryBlock(kind=m.group(1), lid=int(m.group(2)), port=m.group(3))
            blocks.append(block)
            continue
        m = _LINE_RE.match(line)
        if not m or block is None:
            continue
        name, value = m.group(1), m.group(2)
        if name in ("PortSelect", "CounterSelect", "CounterSelect2") or value.startswith("0x"):
            block.fields[name] = value
            continue
        try:
            block.counters[name] = int(value)
        except ValueError:
            block.fields[name] = value
    return blocks
