"""Parser for ``lctl ping <nid>`` (LNet's ping of a peer, Lustre 2.x).

A peer that answers is listed by its NIs, one ``<pid>-<nid>`` line each, the first always the
peer's loopback ``12345-0@lo``; a Multi-Rail peer lists every NI. A peer that does not answer
gives ``failed to ping <nid>: <strerror>`` (on stdout from the netlink path of 2.16, on stderr
from the older ioctl path) and a non-zero exit.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NI_RE = re.compile(r"^(\d+)-(\S+@\S+)$")
_FAIL_RE = re.compile(r"^failed to ping (\S+): (.*)$")


@dataclass
class LnetPing:
    target: str
    peer_nids: list[str] = field(default_factory=list)  # the peer's NIs, loopback left out
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.peer_nids)


def parse_lctl_ping(text: str, target: str = "") -> LnetPing:
    out = LnetPing(target)
    for raw in text.splitlines():
        line = raw.strip()
        fail = _FAIL_RE.match(line)
        if fail:
            out.target = out.target or fail.group(1)
            out.error = fail.group(2).strip() or "failed"
            continue
        ni = _NI_RE.match(line)
        if ni and not ni.group(2).endswith("@lo"):
            out.peer_nids.append(ni.group(2))
    if not out.error and not out.peer_nids:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        out.error = f"unrecognised output: {first}" if first else "no answer"
    return out
