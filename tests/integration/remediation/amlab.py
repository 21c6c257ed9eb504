"""Helpers of the remediation service tests: polling, and a real Alertmanager (Debian's
prometheus-alertmanager) on a free loopback port with its own storage, read back over its v2 API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opsctl.sim.cluster import free_ports

# One route, no receivers that deliver anywhere: the tests read alerts back from the API.
ALERTMANAGER_YML = """\
route:
  receiver: nowhere
  group_by: [alertname]
receivers:
  - name: nowhere
"""


def wait_until(pred, timeout: float = 30.0, interval: float = 0.25):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last value {value!r}")
        time.sleep(interval)


@contextmanager
def running_alertmanager(work: Path) -> Iterator[str]:
    """Start Alertmanager with its files in ``work``; yields its URL once it is ready."""
    (work / "alertmanager.yml").write_text(ALERTMANAGER_YML)
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    with open(work / "alertmanager.log", "wb") as logf:
        proc = subprocess.Popen(
            [
                "prometheus-alertmanager",
                f"--config.file={work / 'alertmanager.yml'}",
                f"--storage.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",  # one instance: no gossip port
                "--log.level=warn",
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                log = (work / "alertmanager.log").read_text()
                raise AssertionError(f"alertmanager exited: {log[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=30)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def active_alerts(url: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts?active=true&silenced=false", timeout=5) as resp:
        return list(json.loads(resp.read()))
