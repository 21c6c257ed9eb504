"""Test-only: real sshd instances on loopback ports, one per simulated node, each with its own
PATH of small scripts that print genuine tool output (the simulated-hardware boundary) and its own
InfiniBand sysfs tree. Host and client keys are generated per test session.

The kernel log: by default a node's ``journalctl`` answers as systemd 252's does on a machine
without journal files (``-- No entries --`` on stdout, ``No journal files were found.`` on stderr,
exit 1, as the development VM shows), so the source falls back to the node's ``dmesg``.
``set_journal`` gives a node a journal instead: a small stand-in for ``journalctl -k -b --no-pager
-o short-monotonic --show-cursor [--after-cursor=C]`` that prints entries and cursors in the shape
systemd 252 prints them (tests/fixtures/real-world/journalctl-*.systemd252.txt) and logs its argv."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from opsctl.parsers.ib_sysfs import parse_flattened

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"


def _free_port(taken: set[int]) -> int:
    """A port free now and not given to another node of this lab: sshd binds it only at start(), so
    two nodes could otherwise get the same one, and the second would be read through the first's
    sshd, whose host key known_hosts accepts (a CI run once saw gpu-005 answer with gpu-001's data)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


# The journal stand-in. Entries live in a JSON file the test appends to; cursor fields as systemd
# writes them: s= seqnum id, i= seqnum (hex), b= boot id, m= monotonic usec, t= realtime usec, x= hash.
_JOURNALCTL = """#!/usr/bin/python3
import json, sys, zlib
STATE, CALLS = {state!r}, {calls!r}
args = sys.argv[1:]
with open(CALLS, "a") as fh:
    fh.write(json.dumps(args) + "\\n")
after = [a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")]
known = {{"-k", "-b", "--no-pager", "-o", "short-monotonic", "--show-cursor"}}
if not {{a for a in args if not a.startswith("--after-cursor=")}} <= known:
    sys.exit("journalctl stand-in: only -k -b --no-pager -o short-monotonic --show-cursor --after-cursor")
st = json.load(open(STATE))
entries = st["entries"]

def cursor(n):
    e = entries[n - 1]
    x = zlib.crc32(e["msg"].encode())
    return "s=%s;i=%x;b=%s;m=%x;t=%x;x=%016x" % (
        st["seqnum_id"], n, st["boot"], int(e["mono"] * 1e6), int(e["realtime"] * 1e6), x)

start = 0
if after:
    fields = dict(p.split("=", 1) for p in after[0].split(";") if "=" in p)
    try:
        start = int(fields["i"], 16)
    except (KeyError, ValueError):
        sys.exit("Failed to seek to cursor: Invalid argument")
    if start > len(entries):
        print("-- No entries --")
        sys.exit(1)
for e in entries[start:]:
    print("[%12.6f] %s kernel: %s" % (e["mono"], st["host"], e["msg"]))
if not entries[start:]:
    print("-- No entries --")
if entries and (after or entries[start:]):
    print("-- cursor: " + cursor(len(entries)))
    sys.exit(0)
sys.exit(1)
"""


@dataclass
class FakeNode:
    name: str
    dir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def sysfs(self) -> Path:
        return self.dir / "sys-class-infiniband"

    def set_nvidia_smi(self, q_fixture: str | None, nvlink_fixture: str | None = None) -> None:
        if q_fixture is None:  # the driver sees no GPU at all
            _script(self.bin / "nvidia-smi", 'echo "No devices were found"; exit 6\n')
            return
        _script(
            self.bin / "nvidia-smi",
            f'case "$1" in\n  -q) cat {REAL_WORLD / q_fixture} ;;\n'
            f"  nvlink) cat {REAL_WORLD / (nvlink_fixture or 'nvidia-smi-nvlink-s.a100.gpud.txt')} ;;\n"
            "  *) exit 2 ;;\nesac\n",
        )

    def set_journal(self, entries: list[tuple[float, str]] | None) -> None:
        """Give the node a journal holding ``(kernel stamp, message)`` entries of the current boot,
        or (None) no journal at all, as systemd 252's journalctl answers then."""
        if entries is None:
            _script(
                self.bin / "journalctl",
                'echo "No journal files were found." >&2\necho "-- No entries --"\nexit 1\n',
            )
            return
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
        state = {"host": self.name, "boot": boot, "seqnum_id": "6c94beb3369b4e30aeb6f4cea512c4dd"}
        state["entries"] = []
        self.journal_state.write_text(json.dumps(state))
        script = self.bin / "journalctl"
        script.write_text(_JOURNALCTL.format(state=str(self.journal_state), calls=str(self.journal_calls)))
        script.chmod(0o755)
        for mono, msg in entries:
            self.journal_append(mono, msg)

    def journal_append(self, mono: float, msg: str) -> None:
        """The kernel logs a line (the stand-in's realtime stamp is derived from the boot time)."""
        state = json.loads(self.journal_state.read_text())
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        state["entries"].append({"mono": mono, "realtime": time.time() - uptime + mono, "msg": msg})
        self.journal_state.write_text(json.dumps(state))

    @property
    def journal_state(self) -> Path:
        return self.dir / "journal.json"

    @property
    def journal_calls(self) -> Path:
        return self.dir / "journalctl.calls"

    def journal_invocations(self) -> list[list[str]]:
        if not self.journal_calls.exists():
            return []
        return [json.loads(line) for line in self.journal_calls.read_text().splitlines()]

    def set_dmesg(self, fixture: str | None) -> None:
        _script(self.bin / "dmesg", f"cat {REAL_WORLD / fixture}\n" if fixture else "exit 0\n")

    def set_slurmd(self, alive: bool) -> None:
        _script(self.bin / "pgrep", "echo 4242\n" if alive else "exit 1\n")

    def hang(self, tool: str) -> None:
        """Make `tool` hang (a stuck driver call); its pid is recorded so the lab can end it."""
        _script(self.bin / tool, f"echo $$ >> {self.dir / 'hung.pids'}\nexec /bin/sleep 300\n")

    def hang_mount(self, path: str) -> None:
        """Make ``stat -f PATH`` hang, as it does on a hung NFS/Lustre mount; any other stat runs."""
        _script(
            self.bin / "stat",
            'for a; do last=$a; done\n'
            f'if [ "$1" = -f ] && [ "$last" = {path} ]; then\n'
            f"  echo $$ >> {self.dir / 'hung.pids'}\n  exec /bin/sleep 300\nfi\n"
            'exec /usr/bin/stat "$@"\n',
        )

    def bump_counter_while_sampling(self, rel: str, by: int) -> None:
        """Make the sysfs counter `rel` grow by `by` while the source waits between its two reads
        (the 'hardware' counts errors in the meantime)."""
        target = self.sysfs / rel
        _script(
            self.bin / "sleep",
            f'v=$(cat {target}); echo $((v + {by})) > {target}\nexec /bin/sleep "$@"\n',
        )


class SshLab:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.client_key = root / "id_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key)], check=True
        )
        self.host_key = root / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)], check=True)
        self.known_hosts = root / "known_hosts"
        self.nodes: dict[str, FakeNode] = {}
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory

    def add_node(
        self,
        name: str,
        flattened_sysfs: str = "sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt",
        host_key: Path | None = None,
    ) -> FakeNode:
        d = self.root / name
        node = FakeNode(name, d, _free_port({n.port for n in self.nodes.values()}))
        node.bin.mkdir(parents=True)
        for rel, value in parse_flattened((REAL_WORLD / flattened_sysfs).read_text()).items():
            f = node.sysfs / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(value + "\n")
        node.set_nvidia_smi("nvidia-smi-q.h100x8.535.183.01.gpud.txt")
        node.set_dmesg(None)
        node.set_journal(None)
        node.set_slurmd(True)
        auth = d / "authorized_keys"
        shutil.copy(f"{self.client_key}.pub", auth)
        key = host_key or self.host_key
        (d / "sshd_config").write_text(
            f"Port {node.port}\nListenAddress 127.0.0.1\nHostKey {key}\nPidFile {d / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {auth}\nStrictModes no\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"SetEnv PATH={node.bin}:/usr/bin:/bin:/usr/sbin:/sbin OPSCTL_IB_SYSFS_ROOT={node.sysfs}\n"
        )
        pub = Path(f"{self.host_key}.pub").read_text().split()
        with open(self.known_hosts, "a") as fh:
            fh.write(f"[127.0.0.1]:{node.port} {pub[0]} {pub[1]}\n")
        self.nodes[name] = node
        return node

    def start(self, node: FakeNode) -> None:
        node.proc = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(node.dir / "sshd_config")],
            stdout=subprocess.DEVNULL,
            stderr=open(node.dir / "sshd.log", "wb"),  # noqa: SIM115
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", node.port), timeout=1):
                    pass
                time.sleep(0.2)  # a port another process holds: this sshd exits at once, unable to bind
                if node.proc.poll() is None:
                    return
                raise OSError("sshd exited")
            except OSError:
                if node.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(  # noqa: B904 - the log says why, not the refused connect
                        f"sshd for {node.name} did not start: {(node.dir / 'sshd.log').read_text()}"
                    )
                time.sleep(0.1)

    def close(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
                try:
                    node.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
            pids = node.dir / "hung.pids"
            for pid in pids.read_text().split() if pids.exists() else []:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        if not os.environ.get("HEALTH_KEEP_TMP"):
            shutil.rmtree(self.root, ignore_errors=True)
