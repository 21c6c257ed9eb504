"""Parser for ``journalctl -k -o short-monotonic --show-cursor`` output: the kernel lines since a
cursor, and the cursor to continue from.

systemd 252 prints each entry as ``[  6612.123456] HOST kernel: MESSAGE`` (the kernel's own
monotonic stamp, as dmesg prints it), ``-- No entries --`` when nothing matched, and, with
``--show-cursor``, a last line ``-- cursor: s=...;i=...;b=...;m=...;t=...;x=...`` whenever the
journal was positioned on an entry (also when no new entry followed the ``--after-cursor`` one).

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CURSOR_PREFIX = "-- cursor: "
# A journal cursor: ';'-separated key=hex fields (s= seqnum id, i= seqnum, b= boot id, m=, t=, x=).
CURSOR_RE = re.compile(r"^[a-z]=[0-9a-f]+(?:;[a-z]=[0-9a-f]+)*$")


@dataclass
class JournalChunk:
    text: str  # the entry lines, in the dmesg line shape the XID parser reads
    cursor: str  # where the next read continues ("" if journalctl printed none)
    entries: int  # how many entry lines


def valid_cursor(cursor: str) -> bool:
    return bool(CURSOR_RE.match(cursor)) and len(cursor) < 512


def parse_journal_kernel(text: str) -> JournalChunk:
    lines: list[str] = []
    cursor = ""
    for line in text.splitlines():
        if line.startswith(CURSOR_PREFIX):
            candidate = line[len(CURSOR_PREFIX) :].strip()
            cursor = candidate if valid_cursor(candidate) else ""
        elif line.startswith("-- ") or not line.strip():
            continue  # "-- No entries --", "-- Boot ... --" separators
        else:
            lines.append(line)
    return JournalChunk("\n".join(lines), cursor, len(lines))
