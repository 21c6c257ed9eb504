"""`opsctl health --source ssh` with the Lustre probe configured ([health] lustre_mount,
lustre_nids), end to end: the CLI as a subprocess, real sshd processes on loopback (sshlab), the
probe's own command run by the node's shell, its dd write landing on a real directory. The Lustre
client is simulated at the command boundary only: `lctl` prints the genuine `lctl ping` samples of
tests/fixtures/real-world (SOURCES.md; the failure sample with this cluster's NID put in), `lfs
check servers` prints the client's line format, `findmnt` answers that the directory is a Lustre
mount (what the kernel's mount table says on a client)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sshlab import REAL_WORLD, SshLab

pytestmark = pytest.mark.integration

NID = "192.168.3.105@tcp"  # the peer the genuine two-NID sample answers for
LFS_ACTIVE = "scratch-MDT0000-mdc-ffff8b0e4f0d6800 active.\nscratch-OST0000-osc-ffff8b0e4f0d6800 active.\n"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _lustre_client(bindir: Path, mount: Path, ping: str) -> None:
    _script(bindir / "findmnt", f'[ "$5" = {mount} ] && echo "{mount} 10.30.0.200@o2ib:/scratch lustre"\n')
    _script(bindir / "lfs", f"cat <<'OUT'\n{LFS_ACTIVE}OUT\n")
    _script(bindir / "lctl", ping)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("lustrelab")
    mount = root / "lustre"
    mount.mkdir()
    lab = SshLab(root / "ssh")
    try:
        healthy, failing = lab.add_node("gpu-001"), lab.add_node("gpu-002")
        _lustre_client(
            healthy.bin, mount, f"cat {REAL_WORLD / 'lctl-ping.two-nids.exascaler.cnloh-notes.txt'}\n"
        )
        failed = REAL_WORLD / "lctl-ping.failed.gmagklaras-lustre-hpc-test-setup.txt"
        _lustre_client(failing.bin, mount, f"sed 's/192.168.14.121@tcp/{NID}/' {failed}\nexit 1\n")
        plain = lab.add_node("gpu-003")  # configured for Lustre, but nothing mounted there
        for node in (healthy, failing, plain):
            lab.start(node)
        addresses = ", ".join(f'{n} = "127.0.0.1:{node.port}"' for n, node in lab.nodes.items())
        cfg = root / "opsctl.toml"
        cfg.write_text(
            f'[health]\nsource = "ssh"\nnodes = "gpu-[001-003]"\nssh_user = "root"\n'
            f'ssh_key = "{lab.client_key}"\nssh_known_hosts = "{lab.known_hosts}"\nssh_timeout = 60.0\n'
            f"ssh_addresses = {{ {addresses} }}\nib_sample_seconds = 0.2\n"
            f'state_file = "{root / "state.json"}"\ndecision_log = "{root / "decisions.jsonl"}"\n'
            f'lustre_mount = "{mount}"\nlustre_nids = ["{NID}"]\nlustre_write_mib = 1\nlustre_timeout = 10\n'
        )
        yield cfg, mount
    finally:
        lab.close()


def test_health_runs_the_lustre_probe_on_each_node(cluster):
    cfg, mount = cluster
    proc = subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(cfg), "health", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    doc = json.loads(proc.stdout)
    lustre = {n["node"]: next(v for v in n["verdicts"] if v["code"] == "lustre") for n in doc["nodes"]}
    assert lustre["gpu-001"]["status"] == "OK", lustre["gpu-001"]
    assert "1 NIDs answer lctl ping, 2 targets active, wrote 1 MiB" in lustre["gpu-001"]["summary"]
    assert lustre["gpu-002"]["status"] == "FAIL"
    assert lustre["gpu-002"]["summary"] == f"{mount}: lctl ping {NID}: Input/output error"
    # gpu-003's real findmnt: the directory is not a Lustre mount, and nothing was written into it
    assert (
        lustre["gpu-003"]["status"] == "FAIL"
        and "is not a mounted Lustre file system" in lustre["gpu-003"]["summary"]
    )
    assert list(mount.iterdir()) == []  # every probe file removed
