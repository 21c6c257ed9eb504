"""Every dashboard query and alert expression is accepted by a real Prometheus."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (make test installs it)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None
    work = tmp_path_factory.mktemp("prom")
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = _free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("prometheus did not become ready")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _expressions() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / "dashboards" / "grafana").glob("*.json")):
        dash = json.loads(path.read_text())
        for panel in dash["panels"]:
            for target in panel["targets"]:
                found.append((f"{path.name}:{panel['title']}", target["expr"]))
        for var in dash["templating"]["list"]:
            if var.get("type") == "query":
                # label_values() is Grafana syntax; check the metric selector inside it.
                inner = var["definition"].split("(", 1)[1].rsplit(",", 1)[0]
                found.append((f"{path.name}:${var['name']}", inner))
    for path in sorted((ROOT / "dashboards" / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                found.append((f"{path.name}:{rule.get('alert') or rule.get('record')}", rule["expr"]))
    return found


def _grafana_to_promql(expr: str) -> str:
    # The dashboards use $node (multi-value, regex) and Grafana's $__rate_interval; substitute what
    # Grafana would for "All".
    return expr.replace("$node", ".*").replace("$__rate_interval", "1m")


@pytest.mark.parametrize(("where", "expr"), _expressions(), ids=[w for w, _ in _expressions()])
def test_query_is_valid_promql(prometheus: str, where: str, expr: str) -> None:
    query = urllib.parse.urlencode({"query": _grafana_to_promql(expr)})
    try:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=10) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"{where}: Prometheus rejected {expr!r}: {exc.read().decode()}")
    assert body["status"] == "success", body
