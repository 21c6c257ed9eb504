"""Every dashboard query and alert expression is accepted by a real Prometheus, and every dashboard
panel returns data on the simulated cluster (real slurmctld, the emulated exporters as the roles
configure them, the production prometheus.yml, the remediation service) with a real training run
scraped through the prometheus role's file_sd job - or is listed in NO_DATA with the reason."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

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
            for target in panel.get("targets", []):  # a row has none
                found.append((f"{path.name}:{panel['title']}", target["expr"]))
        for var in dash["templating"]["list"]:
            if var.get("type") == "query":
                # label_values() is Grafana syntax; check the metric selector inside it.
                inner = var["query"]["query"].split("(", 1)[1].rsplit(",", 1)[0]
                found.append((f"{path.name}:${var['name']}", inner))
    for path in sorted((ROOT / "dashboards" / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                found.append((f"{path.name}:{rule.get('alert') or rule.get('record')}", rule["expr"]))
    return found


def _grafana_to_promql(expr: str) -> str:
    # The dashboards use $node and $run (multi-value, regex) and Grafana's $__rate_interval;
    # substitute what Grafana would for "All" and a 5 s scrape interval.
    return expr.replace("$node", ".*").replace("$run", ".*").replace("$__rate_interval", "1m")


@pytest.mark.parametrize(("where", "expr"), _expressions(), ids=[w for w, _ in _expressions()])
def test_query_is_valid_promql(prometheus: str, where: str, expr: str) -> None:
    query = urllib.parse.urlencode({"query": _grafana_to_promql(expr)})
    try:
        with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=10) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"{where}: Prometheus rejected {expr!r}: {exc.read().decode()}")
    assert body["status"] == "success", body


# -- every panel on live data ---------------------------------------------------------------------
# Panels that cannot return data on the simulated cluster, with the reason (counted in the output).
NO_DATA: dict[tuple[str, str], str] = {}


def _panels() -> list[tuple[str, str, list[str]]]:
    out = []
    for path in sorted((ROOT / "dashboards" / "grafana").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] != "row":
                out.append((path.name, panel["title"], [t["expr"] for t in panel["targets"]]))
    return out


def _query(url: str, expr: str) -> list[dict[str, object]]:
    q = urllib.parse.urlencode({"query": _grafana_to_promql(expr)})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def _live_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboards_live", ROOT / "dashboards" / "live.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def live(tmp_path: Path) -> Iterator[str]:
    """The simulated cluster with its faults, the remediation service and a training run, all
    scraped by the sim's Prometheus (dashboards/live.py); yields its URL."""
    mod = _live_module()
    try:
        with mod.live_cluster(tmp_path) as cluster:
            yield cluster.prometheus_url
    except mod.LiveError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.slow
def test_every_panel_returns_data_on_the_simulated_cluster_with_a_training_run(live: str) -> None:
    panels = _panels()
    assert all((d, t) in {(d2, t2) for d2, t2, _ in panels} for d, t in NO_DATA), "NO_DATA names a gone panel"

    def empty() -> list[tuple[str, str]]:
        return [
            (dash, title)
            for dash, title, exprs in panels
            if (dash, title) not in NO_DATA and not all(_query(live, e) for e in exprs)
        ]

    deadline = time.monotonic() + 300
    missing = empty()
    while missing and time.monotonic() < deadline:
        time.sleep(5)  # a scrape interval
        missing = empty()
    for (dash, title), why in sorted(NO_DATA.items()):
        assert not all(_query(live, e) for e in next(x for d, t, x in panels if (d, t) == (dash, title))), (
            f"{dash}: {title!r} returns data now: take it off NO_DATA"
        )
        print(f"no data by design: {dash}: {title}: {why}")
    print(f"{len(panels) - len(NO_DATA)} of {len(panels)} panels returned data, {len(NO_DATA)} in NO_DATA")
    assert missing == [], f"panels without data on the live cluster: {missing}"
