"""The Lustre client probe: LNet reachability (``lctl ping`` of each server NID), the servers'
state (``lfs check servers``) and a small timed direct write on the mount, as one fixed shell
command for an SSH evidence source and the parser of its output.

``probe_command`` builds the command (every operator-supplied value validated or quoted, each step
bounded by ``timeout``); ``parse_lustre_probe`` reads its output into a ``LustreProbe`` whose
``problems()`` names each failure in one line. Judging a slow write is the caller's (a threshold
passed to ``problems``); the probe only measures.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from .lctl_ping import LnetPing, parse_lctl_ping
from .lfs_check import LfsCheck, parse_lfs_check_servers

MARK = "@@opsctl-lustre@@"
_NID_RE = re.compile(r"^[A-Za-z0-9.:_-]+@[a-z0-9]+$")
# dd's summary line: "67108864 bytes (67 MB, 64 MiB) copied, 0.0512 s, 1.3 GB/s"
_DD_RE = re.compile(r"^(\d+) bytes .*copied, ([0-9.]+) s")


@dataclass
class WriteProbe:
    ok: bool
    bytes: int = 0
    seconds: float | None = None
    error: str = ""


@dataclass
class LustreProbe:
    pings: list[LnetPing] = field(default_factory=list)
    servers: LfsCheck | None = None
    write: WriteProbe | None = None

    def problems(self, max_write_seconds: float | None = None) -> list[str]:
        out = [f"lctl ping {p.target}: {p.error}" for p in self.pings if not p.ok]
        if self.servers is None:
            out.append("lfs check servers: no output")
        elif not self.servers.healthy:
            failed = "; ".join(list(self.servers.failed.values())[:2]) or "no server listed"
            out.append(f"lfs check servers: {failed}")
        if self.write is None:
            out.append("write probe: no output")
        elif not self.write.ok:
            out.append(f"write probe: {self.write.error}")
        elif max_write_seconds is not None and (self.write.seconds or 0.0) > max_write_seconds:
            out.append(
                f"write probe: {self.write.bytes >> 20} MiB took {self.write.seconds:.2f} s "
                f"(limit {max_write_seconds:g} s)"
            )
        return out

    def healthy(self, max_write_seconds: float | None = None) -> bool:
        return not self.problems(max_write_seconds)


def probe_command(
    mount: str, nids: Sequence[str], write_mib: int = 64, timeout_s: int = 30, write_dir: str = ""
) -> str:
    """The probe as one shell command; ValueError on a NID or size that is not plain."""
    if not mount.startswith("/"):
        raise ValueError(f"lustre probe: mount {mount!r} is not an absolute path")
    if not 1 <= int(write_mib) <= 4096:
        raise ValueError("lustre probe: write_mib must be between 1 and 4096")
    t = int(timeout_s)
    steps = []
    for nid in nids:
        if not _NID_RE.match(nid):
            raise ValueError(f"lustre probe: {nid!r} is not a NID (address@net)")
        steps.append(f'echo "{MARK} ping {nid}"; timeout {t} lctl ping {nid} 2>&1; echo "{MARK} rc $?"')
    steps.append(f'echo "{MARK} lfs"; timeout {t} lfs check servers 2>&1; echo "{MARK} rc $?"')
    target = shlex.quote((write_dir or mount).rstrip("/") + "/.opsctl-probe.") + '"$(hostname -s).$$"'
    steps.append(
        f'echo "{MARK} write"; '
        f"timeout {t} dd if=/dev/zero of={target} bs=1M count={int(write_mib)} oflag=direct conv=fsync 2>&1; "
        f'rc=$?; rm -f {target}; echo "{MARK} rc $rc"'
    )
    return "; ".join(steps)


def _sections(text: str) -> list[tuple[str, str, int | None]]:
    """(header, body, rc) per step, in order."""
    out: list[tuple[str, str, int | None]] = []
    header, rc = "", None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            word = line[len(MARK) :].strip()
            if word.startswith("rc "):
                value = word[3:].strip()
                rc = int(value) if value.lstrip("-").isdigit() else None
                out.append((header, "\n".join(body), rc))
                header, body, rc = "", [], None
            else:
                header, body = word, []
        elif header:
            body.append(line)
    if header:  # a step cut off (timeout of the whole command): no rc line
        out.append((header, "\n".join(body), None))
    return out


def _write(body: str, rc: int | None) -> WriteProbe:
    for line in body.splitlines():
        m = _DD_RE.match(line.strip())
        if m and rc == 0:
            return WriteProbe(ok=True, bytes=int(m.group(1)), seconds=float(m.group(2)))
    if rc == 124:
        return WriteProbe(ok=False, error="timed out")
    last = body.strip().splitlines()[-1] if body.strip() else "no output"
    return WriteProbe(ok=False, error=f"exit {rc if rc is not None else '?'}: {last[:120]}")


def parse_lustre_probe(text: str) -> LustreProbe:
    probe = LustreProbe()
    for header, body, rc in _sections(text):
        if header.startswith("ping "):
            ping = parse_lctl_ping(body, header[5:].strip())
            if rc == 124:
                ping.error = "timed out"
            elif rc not in (0, None) and not ping.error:
                ping.error = f"exit {rc}"
            probe.pings.append(ping)
        elif header == "lfs":
            probe.servers = parse_lfs_check_servers(body if rc != 124 else "")
            if rc == 124:
                probe.servers.failed["lfs check servers"] = "timed out"
        elif header == "write":
            probe.write = _write(body, rc)
    return probe
