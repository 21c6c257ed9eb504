"""The loop without daemons: every pass fails on an unreachable Prometheus (a port nothing listens
on), and the service must count it, record it and go on; the CLI around it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from remediator_config import free_port, write_config

from opsctl.remediation.loop import Remediator
from opsctl.remediation.metrics import RemediatorMetrics
from opsctl.remediation.pause import read_pause
from opsctl.remediation.status import PassStatus, read_status, write_status


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path, remediator=f'interval = 0.2\nmetrics_address = "127.0.0.1:{free_port()}"')


def opsctl(config: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_failing_pass_is_counted_recorded_and_survived(config, tmp_path):
    metrics = RemediatorMetrics()
    service = Remediator(str(config), metrics=metrics)
    first = service.run_pass()
    second = service.run_pass()
    assert (first.ok, second.ok) == (False, False)
    assert "Unreachable: prometheus at" in second.error and second.errors == 2 and second.number == 2
    assert read_status(tmp_path / "status.json") == second
    assert (
        metrics.registry.get_sample_value("opsctl_remediator_pass_errors_total", {"kind": "Unreachable"}) == 2
    )
    assert metrics.registry.get_sample_value("opsctl_remediator_passes_total", {"result": "ok"}) == 0
    assert metrics.registry.get_sample_value("opsctl_remediator_paused") == 0


def test_recent_drains_survive_a_restart_and_failing_passes(config, tmp_path):
    drain = {
        "time": 1.0,
        "mode": "apply",
        "node": "gpu-003",
        "action": "drain",
        "code": "gpu-xid",
        "result": "applied",
        "reason": "opsctl:health:gpu-xid:xid 79",
        "why": "failing check",
    }
    write_status(
        tmp_path / "status.json",
        PassStatus(time=1.0, number=9, ok=True, duration_s=0.3, interval=0.2, recent=[drain]),
    )
    service = Remediator(str(config))  # a restarted service
    assert service.run_pass().ok is False
    st = read_status(tmp_path / "status.json")
    assert st is not None and st.number == 1 and st.recent == [drain]
    out = opsctl(config, "remediator", "status")
    assert "recent drains and resumes:" in out.stdout
    assert "1970-01-01T00:00:01+00:00 apply  drain   gpu-003" in out.stdout


def test_the_pause_file_is_read_every_pass(config, tmp_path):
    metrics = RemediatorMetrics()
    service = Remediator(str(config), metrics=metrics)
    (tmp_path / "paused.json").write_text(json.dumps({"by": "bob", "since": "now", "reason": "drill"}))
    assert service.run_pass().paused is True
    assert metrics.registry.get_sample_value("opsctl_remediator_paused") == 1
    (tmp_path / "paused.json").unlink()
    assert service.run_pass().paused is False
    assert metrics.registry.get_sample_value("opsctl_remediator_paused") == 0


def test_the_loop_keeps_its_cadence_until_stopped(config):
    service = Remediator(str(config))
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    last = service.run(stop)
    assert last is not None and last.number == service.number >= 2
    # the metrics server is gone with the loop
    port = service.settings.metrics_host_port()[1]
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_run_once_exits_3_when_its_pass_failed(config):
    out = opsctl(config, "remediator", "run", "--once")
    assert out.returncode == 3, out.stderr
    assert "pass 1 failed" in out.stderr and "Unreachable" in out.stderr
    assert "Traceback" not in out.stderr


def test_sigterm_ends_the_loop_with_exit_0(config, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "opsctl", "--config", str(config), "remediator", "run"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stderr:
            if "pass 1 failed" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "SIGTERM: stopping after the current pass" in rest and "remediator stopped after" in rest


def test_pause_status_unpause_from_the_command_line(config, tmp_path):
    out = opsctl(config, "remediator", "status")
    assert out.returncode == 3 and "last pass: none recorded" in out.stdout
    out = opsctl(config, "remediator", "pause", "--reason", "")
    assert (
        out.returncode == 2
        and out.stderr.strip() == "opsctl: error: --reason must say why remediation is paused"
    )
    out = opsctl(config, "remediator", "pause", "--reason", "rack 4 PDU work")
    assert out.returncode == 0 and "shadow mode" in out.stdout
    assert read_pause(tmp_path / "paused.json").reason == "rack 4 PDU work"
    opsctl(config, "remediator", "run", "--once")
    out = opsctl(config, "remediator", "status", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 3  # no pass has ever succeeded
    assert doc["paused"] is True and doc["pause"]["reason"] == "rack 4 PDU work"
    assert doc["last_pass"]["ok"] is False and doc["stale"] is True
    out = opsctl(config, "remediator", "status")
    assert "paused: yes" in out.stdout and "FAILED: Unreachable" in out.stdout
    out = opsctl(config, "remediator", "unpause")
    assert out.returncode == 0 and "was paused by" in out.stdout
    assert opsctl(config, "remediator", "unpause").stdout.strip() == "not paused"
    actions = [json.loads(line)["action"] for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert actions == ["remediator-pause", "remediator-unpause", "remediator-unpause"]


def test_bad_remediator_config_is_one_line_exit_2(config):
    config.write_text(config.read_text().replace("interval = 0.2", "interval = -1"))
    out = opsctl(config, "remediator", "run", "--once")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "remediator.interval: must be between 0.1 and 3600" in out.stderr


def test_the_remediator_command_is_listed_and_light():
    code = (
        "import sys, json\nfrom opsctl.cli import cli\n"
        "try:\n    cli.main(args=['remediator', '--help'], prog_name='opsctl', standalone_mode=False)\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "opsctl.cli.remediator" in loaded
    assert not {"prometheus_client", "opsctl.remediation.loop", "tenacity", "torch"} & loaded
    for sub in ("run", "pause", "unpause", "status"):
        assert sub in out.stdout


def test_prometheus_gone_longer_than_unknown_alert_after_pages_once_and_drains_nothing(config, tmp_path):
    import time as _time

    config.write_text(config.read_text().replace("[health]\n", "[health]\nunknown_alert_after = 0.3\n"
                                                 "unknown_fail_after = 0.5\n"))

    class Recorder:
        def __init__(self) -> None:
            self.sent: list[list[dict]] = []

        def send(self, alerts):
            self.sent.append(alerts)

    service = Remediator(str(config), metrics=RemediatorMetrics())
    service.alerts = Recorder()  # type: ignore[assignment]
    first = service.run_pass()
    assert not first.ok and service.alerts.sent == []  # not before unknown_alert_after
    _time.sleep(0.6)  # longer than unknown_fail_after too
    passes = [service.run_pass() for _ in range(3)]
    assert all(not p.ok for p in passes)
    # each pass re-sends the one alert (Alertmanager keeps it one page while it holds)
    assert len(service.alerts.sent) == 3 and all(len(batch) == 1 for batch in service.alerts.sent)
    (alert,) = service.alerts.sent[-1]
    assert alert["labels"]["alertname"] == "OpsctlEvidenceSourceLost"
    assert alert["labels"]["severity"] == "page"
    assert alert["labels"]["nodes"] == "gpu-[001-004]" and "prometheus" in alert["annotations"]["summary"]
    # the pass error is still counted under its kind, as before
    assert service.metrics.registry.get_sample_value(
        "opsctl_remediator_pass_errors_total", {"kind": "Unreachable"}) == 4
    assert not (tmp_path / "state.json").exists() or json.loads((tmp_path / "state.json").read_text())[
        "drains"] == []
