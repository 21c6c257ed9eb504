"""[remediator] settings, the pause file and the status file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsctl.audit import AuditLog
from opsctl.config import parse_config
from opsctl.errors import ConfigError, UsageError
from opsctl.remediation.pause import pause, read_pause, unpause
from opsctl.remediation.settings import RemediatorSection
from opsctl.remediation.status import PassStatus, read_status, write_status


def section(text: str, where: Path) -> RemediatorSection:
    return parse_config(text, where / "opsctl.toml").section("remediator", RemediatorSection)


def test_defaults_and_relative_paths(tmp_path):
    s = section('[remediator]\npause_file = "run/paused.json"\n', tmp_path)
    assert (s.interval, s.metrics_address, s.alertmanager_url) == (15.0, "127.0.0.1:9105", "")
    assert s.pause_file == str(tmp_path / "run" / "paused.json")
    assert s.status_file == "/var/lib/opsctl/remediator-status.json"
    assert s.metrics_host_port() == ("127.0.0.1", 9105)
    assert section('[remediator]\nmetrics_address = ""\n', tmp_path).metrics_host_port() is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("interval = 0", "remediator.interval: must be between 0.1 and 3600"),
        ('metrics_address = "127.0.0.1"', "remediator.metrics_address: needs host:port"),
        ('metrics_address = "127.0.0.1:99999"', "remediator.metrics_address: bad port"),
        ('alertmanager_url = "am:9093"', "remediator.alertmanager_url: must start with http://"),
        ("alertmanager_attempts = 0", "remediator.alertmanager_attempts: must be between 1 and 10"),
        ("alertmanager_timeout = -1", "remediator.alertmanager_timeout: must be in (0, 60]"),
        ("intervall = 5", "unknown key remediator.intervall"),
        ('interval = "fast"', "remediator.interval: expected a number"),
    ],
)
def test_bad_values_name_the_key(tmp_path, line, message):
    with pytest.raises(ConfigError, match=None) as err:
        section(f"[remediator]\n{line}\n", tmp_path)
    assert message in str(err.value)


def test_pause_unpause_write_the_file_and_the_audit_log(tmp_path, monkeypatch):
    monkeypatch.setenv("SUDO_USER", "alice")
    path, audit = tmp_path / "state" / "paused.json", AuditLog(tmp_path / "audit.jsonl")
    assert read_pause(path) is None
    p, result = pause(path, audit, "  NVSwitch   firmware \n rollout ")
    assert result == "applied" and p.by == "alice" and p.reason == "NVSwitch firmware rollout"
    assert json.loads(path.read_text())["reason"] == "NVSwitch firmware rollout"
    assert read_pause(path) == p
    # pausing twice keeps the first pause (who paused, and why, stays true) and says so
    again, result = pause(path, audit, "something else")
    assert result == "noop" and again == p
    lifted, result = unpause(path, audit, "rollout done")
    assert result == "applied" and lifted == p and not path.exists()
    assert unpause(path, audit) == (None, "noop")
    records = [(r["action"], r["result"], r["reason"], r["user"]) for r in audit.read()]
    assert records == [
        ("remediator-pause", "applied", "NVSwitch firmware rollout", "alice"),
        ("remediator-pause", "noop", "something else", "alice"),
        ("remediator-unpause", "applied", "rollout done", "alice"),
        ("remediator-unpause", "noop", "", "alice"),
    ]
    assert [f.name for f in path.parent.iterdir()] == []  # no temporary file left behind


def test_a_pause_needs_a_reason_and_a_writable_audit_log(tmp_path):
    with pytest.raises(UsageError, match="--reason"):
        pause(tmp_path / "p.json", AuditLog(tmp_path / "audit.jsonl"), "  \n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="audit log"):
        pause(tmp_path / "p.json", AuditLog(blocker / "audit.jsonl"), "why")
    assert not (tmp_path / "p.json").exists()


def test_an_unwritable_pause_file_is_a_one_line_error_and_audited_as_failed(tmp_path):
    # /proc takes no new files, not even from root; the file does not exist, so it is not paused
    path = Path("/proc/opsctl-remediator-paused.json")
    audit = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(ConfigError, match=r"pause file .* is not writable"):
        pause(path, audit, "why")
    assert [(r["action"], r["result"]) for r in audit.read()] == [("remediator-pause", "failed")]


@pytest.mark.parametrize("content", ["{not json", '{"by": "x"}', "[]"])
def test_an_unreadable_pause_file_counts_as_paused(tmp_path, content):
    path = tmp_path / "paused.json"
    path.write_text(content)
    p = read_pause(path)
    assert p is not None and "unreadable" in p.reason and "treated as paused" in p.reason


def test_status_round_trip_and_staleness(tmp_path):
    st = PassStatus(
        time=1000.0,
        number=7,
        ok=True,
        duration_s=0.5,
        interval=15.0,
        mode="apply",
        counts={"OK": 63, "FAIL": 1},
        last_success=1000.0,
        decisions=[{"node": "gpu-003", "action": "drain", "result": "applied"}],
    )
    write_status(tmp_path / "status.json", st)
    assert read_status(tmp_path / "status.json") == st
    assert not st.stale(now=1000.0 + 45.0)  # three intervals (plus the pass itself) is fine
    assert st.stale(now=1000.0 + 46.0)
    failing = PassStatus(
        time=1100.0, number=8, ok=False, duration_s=0.1, interval=15.0, error="x", last_success=1000.0
    )
    assert failing.stale(now=1100.0)  # recent, but the last pass that ran is too old
    never = PassStatus(time=1100.0, number=1, ok=False, duration_s=0.1, interval=15.0)
    assert never.stale(now=1100.0)
    assert read_status(tmp_path / "missing.json") is None
    (tmp_path / "junk.json").write_text('{"time": 1}')
    assert read_status(tmp_path / "junk.json") is None
