"""Test-only: real sshd instances on loopback ports, one per simulated node, each with its own
PATH of small scripts that print genuine tool output (the simulated-hardware boundary) and its own
InfiniBand sysfs tree. Host and client keys are generated per test session."""

from __future__ import annotations

import contextlib
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


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

    def set_dmesg(self, fixture: str | None) -> None:
        _script(self.bin / "dmesg", f"cat {REAL_WORLD / fixture}\n" if fixture else "exit 0\n")

    def set_slurmd(self, alive: bool) -> None:
        _script(self.bin / "pgrep", "echo 4242\n" if alive else "exit 1\n")

    def hang(self, tool: str) -> None:
        """Make `tool` hang (a stuck driver call); its pid is recorded so the lab can end it."""
        _script(self.bin / tool, f"echo $$ >> {self.dir / 'hung.pids'}\nexec /bin/sleep 300\n")

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
        node = FakeNode(name, d, _free_port())
        node.bin.mkdir(parents=True)
        for rel, value in parse_flattened((REAL_WORLD / flattened_sysfs).read_text()).items():
            f = node.sysfs / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(value + "\n")
        node.set_nvidia_smi("nvidia-smi-q.h100x8.535.183.01.gpud.txt")
        node.set_dmesg(None)
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
                    return
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
