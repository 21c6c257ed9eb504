"""Parser for ``lfs check servers`` (Lustre client): one line per MDC/OSC target,
``<fsname>-<TARGET>-<type>-<instance> active.`` when the server answers, or an ``error:`` /
``inactive`` line naming the target when it does not.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TARGET_RE = re.compile(r"([A-Za-z0-9_]+-(?:MDT|OST|MGS)[0-9a-fA-F]*-\w+-[0-9a-fA-Fx]+)")


@dataclass
class LfsCheck:
    active: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # target (or line) -> message

    @property
    def healthy(self) -> bool:
        return bool(self.active) and not self.failed


def parse_lfs_check_servers(text: str) -> LfsCheck:
    out = LfsCheck()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _TARGET_RE.search(line)
        target = m.group(1) if m else line
        if line.endswith(" active.") and not line.startswith("error"):
            out.active.append(target)
        else:
            out.failed[target] = line
    return out
