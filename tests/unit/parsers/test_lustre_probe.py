"""`lctl ping` on genuine samples, and the Lustre probe run for real by a shell: its dd write on
this machine's file system, `lctl` and `lfs` (no Lustre client here) as tools that print genuine
output (the Lustre client is hardware-side: the lowest boundary the tests simulate)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from opsctl.parsers.lctl_ping import parse_lctl_ping
from opsctl.parsers.lustre_probe import parse_lustre_probe, probe_command

OK_PING = "lctl-ping.two-nids.exascaler.cnloh-notes.txt"
FAILED_PING = "lctl-ping.failed.gmagklaras-lustre-hpc-test-setup.txt"
# `lfs check servers` in the shape the client prints it (no genuine sample was found; see
# tests/unit/parsers/test_lfs_check.py).
LFS_ACTIVE = "scratch-MDT0000-mdc-ffff8b0e4f0d6800 active.\nscratch-OST0000-osc-ffff8b0e4f0d6800 active.\n"


def test_a_multi_rail_peer_lists_its_nis_without_loopback(real):
    ping = parse_lctl_ping(real(OK_PING), "192.168.3.105@tcp")
    assert ping.ok and ping.peer_nids == ["192.168.3.105@tcp", "192.168.3.109@tcp"]


def test_an_unreachable_peer_names_the_error(real):
    ping = parse_lctl_ping(real(FAILED_PING))
    assert not ping.ok
    assert (ping.target, ping.error) == ("192.168.14.121@tcp", "Input/output error")


def test_empty_or_foreign_output_is_not_an_answer():
    assert parse_lctl_ping("").error == "no answer"
    assert parse_lctl_ping("lctl: command not found\n").error.startswith("unrecognised output")


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _run(command: str, bindir: Path) -> str:
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    return proc.stdout


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


def test_a_healthy_client_passes_with_a_real_timed_write(tmp_path, bindir, real):
    _tool(bindir, "lctl", f"cat <<'OUT'\n{real(OK_PING)}OUT\n")
    _tool(bindir, "lfs", f"cat <<'OUT'\n{LFS_ACTIVE}OUT\n")
    out = _run(
        probe_command("/lustre/scratch", ["192.168.3.105@tcp"], write_mib=4, write_dir=str(tmp_path)), bindir
    )
    probe = parse_lustre_probe(out)
    assert probe.healthy(), probe.problems()
    assert probe.pings[0].peer_nids == ["192.168.3.105@tcp", "192.168.3.109@tcp"]
    assert probe.servers is not None and len(probe.servers.active) == 2
    assert probe.write is not None and probe.write.bytes == 4 << 20 and probe.write.seconds is not None
    assert not list(tmp_path.glob(".opsctl-probe.*")), "the probe leaves no file behind"
    # a threshold below what any write takes turns the same result into a problem
    assert probe.problems(max_write_seconds=0.0) == [
        f"write probe: 4 MiB took {probe.write.seconds:.2f} s (limit 0 s)"
    ]


def test_each_failure_is_named(tmp_path, bindir, real):
    _tool(bindir, "lctl", f"cat <<'OUT'\n{real(FAILED_PING)}OUT\nexit 1\n")
    _tool(
        bindir,
        "lfs",
        "echo 'scratch-MDT0000-mdc-ffff8b0e4f0d6800 active.'\n"
        "echo \"error: check 'scratch-OST0001-osc-ffff8b0e4f0d6800':"
        " Resource temporarily unavailable (11)\"\n"
        "exit 11\n",
    )
    missing = tmp_path / "not-mounted"
    out = _run(
        probe_command("/lustre/scratch", ["192.168.14.121@tcp"], write_mib=1, write_dir=str(missing)), bindir
    )
    problems = parse_lustre_probe(out).problems()
    assert problems[0] == "lctl ping 192.168.14.121@tcp: Input/output error"
    assert problems[1].startswith("lfs check servers: error: check 'scratch-OST0001-osc-")
    assert problems[2].startswith("write probe: exit 1: dd: failed to open")


def test_a_hung_step_times_out_and_the_rest_still_runs(tmp_path, bindir):
    _tool(bindir, "lctl", "sleep 20\n")
    _tool(bindir, "lfs", f"cat <<'OUT'\n{LFS_ACTIVE}OUT\n")
    cmd = probe_command(
        "/lustre/scratch", ["10.30.0.200@o2ib"], write_mib=1, timeout_s=1, write_dir=str(tmp_path)
    )
    probe = parse_lustre_probe(_run(cmd, bindir))
    assert [p.error for p in probe.pings] == ["timed out"]
    assert probe.servers is not None and probe.servers.healthy
    assert probe.write is not None and probe.write.ok


def test_no_output_names_the_missing_steps():
    assert parse_lustre_probe("").problems() == [
        "lfs check servers: no output",
        "write probe: no output",
    ]


@pytest.mark.parametrize("nid", ["10.0.0.1@o2ib; reboot", "$(id)@tcp", "10.0.0.1"])
def test_a_nid_that_is_not_plain_is_refused(nid):
    with pytest.raises(ValueError, match="is not a NID"):
        probe_command("/lustre/scratch", [nid])


def test_the_mount_path_is_quoted():
    cmd = probe_command("/lustre/scratch dir", [], write_mib=1)
    assert "of='/lustre/scratch dir/.opsctl-probe.'\"$(hostname -s).$$\"" in cmd
