"""The lustre check of `opsctl health`: the SSH source's probe command run by a real shell (its dd
write really lands on this machine's file system), with the Lustre client simulated at the command
boundary only (this machine has no Lustre kernel): `lctl` printing the genuine samples of
tests/fixtures/real-world (SOURCES.md), `lfs check servers` in the client's line format (no genuine
sample exists; see tests/unit/parsers/test_lfs_check.py) and `findmnt` answering for the kernel's
mount table. Then evidence -> verdict, and a probe that keeps timing out -> probe-hung."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from test_catalogue import NOW

from opsctl.checks.model import Status
from opsctl.checks.runner import judge_node
from opsctl.checks.settings import PolicyConfig
from opsctl.checks.thresholds import load_thresholds
from opsctl.config import parse_config
from opsctl.errors import ConfigError
from opsctl.evidence.ssh import SSH_FACTS, CommandResult, SshSettings, commands, evidence_from_outputs
from opsctl.remediation.state import PolicyState
from opsctl.remediation.unknown import probe_verdicts

OK_PING = "lctl-ping.two-nids.exascaler.cnloh-notes.txt"  # peer 192.168.3.105@tcp, two NIs
FAILED_PING = "lctl-ping.failed.gmagklaras-lustre-hpc-test-setup.txt"  # 192.168.14.121@tcp, EIO
LFS_ACTIVE = "scratch-MDT0000-mdc-ffff8b0e4f0d6800 active.\nscratch-OST0000-osc-ffff8b0e4f0d6800 active.\n"


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def client(tmp_path: Path) -> tuple[Path, Path]:
    """(bindir, mount): a directory standing in for the mounted file system, and findmnt answering
    that it is a Lustre mount (what the kernel's mount table says on a client)."""
    bindir, mount = tmp_path / "bin", tmp_path / "lustre"
    bindir.mkdir()
    mount.mkdir()
    _tool(bindir, "findmnt", f'[ "$5" = {mount} ] && echo "{mount} 10.30.0.200@o2ib:/scratch lustre"\n')
    _tool(bindir, "lfs", f"cat <<'OUT'\n{LFS_ACTIVE}OUT\n")
    return bindir, mount


def _settings(mount: Path | str, nid: str, **kw: object) -> SshSettings:
    return SshSettings(lustre_mount=str(mount), lustre_nids=[nid], lustre_write_mib=1, lustre_timeout=2, **kw)  # type: ignore[arg-type]


def _probe(settings: SshSettings, bindir: Path | None) -> dict[str, CommandResult]:
    """Run the source's own command in a shell, as sshd would on the node."""
    path = f"{bindir}{os.pathsep}{os.environ['PATH']}" if bindir else os.environ["PATH"]
    proc = subprocess.run(
        ["sh", "-c", commands(settings)["lustre"]],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=path),
        timeout=60,
    )
    return {"lustre": CommandResult(proc.returncode, proc.stdout, proc.stderr)}


def _judge(settings: SshSettings, out: dict[str, CommandResult]):  # type: ignore[no-untyped-def]
    ev = evidence_from_outputs("gpu-001", out, NOW, settings)
    verdicts = [v for v in judge_node(ev, load_thresholds(None), NOW).verdicts if v.code == "lustre"]
    return ev, verdicts


def test_a_healthy_client_is_ok_after_a_real_write(client, real):
    bindir, mount = client
    _tool(bindir, "lctl", f"cat <<'OUT'\n{real(OK_PING)}OUT\n")
    s = _settings(mount, "192.168.3.105@tcp")
    ev, (v,) = _judge(s, _probe(s, bindir))
    assert v.status is Status.OK, v.summary
    assert "1 NIDs answer lctl ping, 2 targets active, wrote 1 MiB in" in v.summary
    assert ev.lustre is not None and ev.lustre.write_bytes == 1 << 20
    assert list(mount.iterdir()) == []  # the probe file is removed


def test_an_unreachable_server_fails_naming_the_nid(client, real):
    bindir, mount = client
    _tool(bindir, "lctl", f"cat <<'OUT'\n{real(FAILED_PING)}OUT\nexit 1\n")
    s = _settings(mount, "192.168.14.121@tcp")
    ev, (v,) = _judge(s, _probe(s, bindir))
    assert v.status is Status.FAIL and v.evidence["action"] == "none"
    assert v.summary == f"{mount}: lctl ping 192.168.14.121@tcp: Input/output error"
    assert ev.probe_timeouts == []


def test_a_slow_write_fails_only_with_a_limit(client, real):
    bindir, mount = client
    _tool(bindir, "lctl", f"cat <<'OUT'\n{real(OK_PING)}OUT\n")
    # a client whose 1 MiB direct write takes 9.5 s: dd's (coreutils) summary line, in its format
    _tool(bindir, "dd", 'echo "1048576 bytes (1.0 MB, 1.0 MiB) copied, 9.5 s, 110 kB/s"\n')
    out = _probe(_settings(mount, "192.168.3.105@tcp"), bindir)
    _, (ok,) = _judge(_settings(mount, "192.168.3.105@tcp"), out)
    _, (slow,) = _judge(_settings(mount, "192.168.3.105@tcp", lustre_max_write_seconds=5.0), out)
    assert ok.status is Status.OK
    assert slow.status is Status.FAIL and "1 MiB took 9.50 s (limit 5 s)" in slow.summary


def test_no_write_beneath_a_mount_that_is_not_lustre(tmp_path):
    """The real findmnt: a plain directory is not a Lustre mount, so nothing is written into it."""
    s = _settings(tmp_path, "192.168.3.105@tcp")
    _, (v,) = _judge(s, _probe(s, None))
    assert (
        v.status is Status.FAIL and v.summary == f"{tmp_path}: {tmp_path} is not a mounted Lustre file system"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_hung_ping_is_unknown_then_probe_hung_after_n_passes(client):
    bindir, mount = client
    _tool(bindir, "lctl", "exec sleep 30\n")  # LNet waiting on a dead peer
    s = _settings(mount, "10.30.0.200@o2ib")
    out = _probe(s, bindir)
    ev, (v,) = _judge(s, out)
    assert v.status is Status.UNKNOWN and "timed out: lctl ping 10.30.0.200@o2ib" in v.summary
    assert ev.probe_timeouts == [f"lustre:{mount}"]
    cfg, state = PolicyConfig(probe_hung_passes=2), PolicyState()
    hung = []
    for _ in range(2):
        report = judge_node(evidence_from_outputs("gpu-001", out, NOW, s), load_thresholds(None), NOW)
        probe_verdicts(report, state, cfg, count=True)
        hung.append([v.status for v in report.verdicts if v.code == "probe-hung"])
    assert hung == [[], [Status.FAIL]]


def test_without_a_lustre_mount_the_check_does_not_apply():
    s = SshSettings()
    assert "lustre" not in commands(s) and "lustre" not in SSH_FACTS
    ev = evidence_from_outputs("gpu-001", {}, NOW, s)
    assert "lustre" not in ev.provides
    assert [v for v in judge_node(ev, load_thresholds(None), NOW).verdicts if v.code == "lustre"] == []


def test_configured_but_not_answered_is_unknown_not_healthy():
    s = _settings("/lustre/scratch", "10.30.0.200@o2ib")
    _, (v,) = _judge(s, {"lustre": CommandResult(255, "", "")})
    assert v.status is Status.UNKNOWN


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('lustre_nids = ["10.30.0.200@o2ib"]', "health.lustre_nids: set lustre_mount too"),
        ('lustre_mount = "lustre"', "health.lustre_mount: must be an absolute path"),
        ('lustre_mount = "/l"\nlustre_nids = ["a;b@o2ib"]', "health.lustre_nids: 'a;b@o2ib' is not a NID"),
        ('lustre_mount = "/l"\nlustre_write_mib = 0', "health.lustre_write_mib: write_mib must be between"),
    ],
)
def test_bad_lustre_settings_are_one_line_config_errors(text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config(f"[health]\n{text}\n")
