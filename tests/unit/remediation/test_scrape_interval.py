"""The remediator's interval against Prometheus's scrape interval (issue 20, item 7): the default
is no shorter than the provisioned scrape interval, and a shorter one is warned about where
Prometheus says what it scrapes at."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from remediator_config import write_config

from opsctl.remediation.loop import Remediator
from opsctl.remediation.scrape import (
    interval_warning,
    parse_duration,
    shortest_scrape_interval,
)
from opsctl.remediation.settings import RemediatorSection

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_interval_is_no_shorter_than_the_provisioned_scrape_interval():
    prom = yaml.safe_load((ROOT / "roles/prometheus/defaults/main.yml").read_text())
    scrape = parse_duration(prom["prometheus_scrape_interval"])
    role = yaml.safe_load((ROOT / "roles/opsctl_remediation/defaults/main.yml").read_text())
    assert RemediatorSection().interval >= scrape
    assert float(role["opsctl_remediation_config_defaults"]["remediator"]["interval"]) >= scrape


def test_durations_and_the_shortest_scrape_interval():
    assert [parse_duration(t) for t in ("15s", "1m30s", "500ms", "2h")] == [15.0, 90.0, 0.5, 7200.0]
    for bad in ("", "15", "15 s", "s15", "1.5s"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert shortest_scrape_interval({}) == 60.0  # Prometheus's own default
    assert shortest_scrape_interval({"global": {"scrape_interval": "15s"},
                                     "scrape_configs": [{"job_name": "node"}]}) == 15.0
    jobs = [{"job_name": "dcgm", "scrape_interval": "30s"}, {"job_name": "node", "scrape_interval": "20s"}]
    assert shortest_scrape_interval({"global": {"scrape_interval": "15s"}, "scrape_configs": jobs}) == 20.0
    assert interval_warning(15.0, 15.0) == "" and interval_warning(30.0, 15.0) == ""
    assert "shorter than Prometheus's scrape interval (15s)" in interval_warning(2.0, 15.0)


@pytest.fixture
def prometheus() -> Iterator[str]:
    """A stand-in that answers /api/v1/status/config as Prometheus does."""
    body = json.dumps({"status": "success", "data": {"yaml": "global:\n  scrape_interval: 15s\n"
                                                             "scrape_configs:\n- job_name: node\n"}})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            ok = self.path == "/api/v1/status/config"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(body.encode() if ok else b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def config(tmp_path: Path, url: str, interval: float) -> str:
    return str(write_config(tmp_path, url, f'interval = {interval}\nmetrics_address = ""'))


def test_a_configured_interval_under_the_scrape_interval_is_warned_about(tmp_path, prometheus, caplog):
    caplog.set_level(logging.INFO, "opsctl.remediator")
    short = Remediator(config(tmp_path, prometheus, 2.0))
    assert "interval 2s is shorter than Prometheus's scrape interval (15s)" in short.check_interval()
    assert any(r.levelno == logging.WARNING and "scrape interval" in r.getMessage() for r in caplog.records)
    assert Remediator(config(tmp_path, prometheus, 15.0)).check_interval() == ""
    # --interval overrides the file, and is checked the same way
    assert Remediator(config(tmp_path, prometheus, 15.0), interval=1.0).check_interval()


def test_an_unreachable_prometheus_leaves_the_interval_unjudged(tmp_path):
    service = Remediator(config(tmp_path, "http://127.0.0.1:9", 2.0))
    assert service.check_interval() == ""
