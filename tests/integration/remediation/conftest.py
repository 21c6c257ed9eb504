"""Fixtures of the remediation service tests: an 8-node simulated cluster with monitoring (real
slurmctld/slurmd, emulated exporters scraped by a real Prometheus) and a real Alertmanager
(Debian's prometheus-alertmanager) on a free loopback port with its own storage."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsctl.sim.cluster import SimCluster, free_ports

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "prometheus", "prometheus-alertmanager")

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


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="rmd", dir="/tmp"))
    cluster = SimCluster(nodes=8, state_dir=state_dir, addons=["monitoring"])
    try:
        cluster.up()
        yield cluster
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("alertmanager")
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
