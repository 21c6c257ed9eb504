"""PNG pictures of the dashboards' time-series panels, drawn from a live Prometheus.

    python dashboards/pictures.py --minutes 8 --out docs/img/dashboards
        starts the simulated cluster with faults and a real training run (dashboards/live.py),
        lets Prometheus scrape it for MINUTES, draws, and stops everything;
    python dashboards/pictures.py --prometheus URL --minutes 30 --out DIR
        draws the last MINUTES of an existing Prometheus.

One PNG per dashboard (dashboards/grafana/NAME.json -> NAME.png), one plot per time-series panel,
with the panel's own queries and legends (Grafana's $node/$run "All" and $__rate_interval = 1m).
Needs matplotlib (pip install matplotlib).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STEP_S = 5  # the sim's scrape interval
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def promql(expr: str) -> str:
    return expr.replace("$node", ".*").replace("$run", ".*").replace("$__rate_interval", "1m")


def query_range(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": promql(expr), "start": start, "end": end, "step": STEP_S})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{q}", timeout=30) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise RuntimeError(f"prometheus refused {expr!r}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt)


def draw(url: str, dashboard: Path, out: Path, minutes: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dash = json.loads(dashboard.read_text())
    panels = [p for p in dash["panels"] if p["type"] == "timeseries"]
    end = time.time()
    start = end - minutes * 60
    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        for target in panel["targets"]:
            for series in query_range(url, target["expr"], start, end):
                xs = [(float(t) - end) / 60 for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                ax.plot(xs, ys, linewidth=1.2, label=legend(target.get("legendFormat", ""), series["metric"]))
        ax.set_title(panel["title"], fontsize=10, loc="left")
        ax.set_xlabel("minutes ago", fontsize=8)
        if unit and unit != "none":
            ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(f"{dash['title']} (simulated cluster, last {minutes:g} min)", fontsize=12)
    fig.tight_layout()
    path = out / f"{dashboard.stem}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", help="an existing Prometheus (default: start the simulated cluster)")
    ap.add_argument("--minutes", type=float, default=8.0, help="time range drawn (default 8)")
    ap.add_argument("--out", type=Path, default=Path("docs/img/dashboards"), help="output directory")
    args = ap.parse_args(argv)
    if args.minutes <= 0:
        ap.error("--minutes must be > 0")
    args.out.mkdir(parents=True, exist_ok=True)
    dashboards = sorted((HERE / "grafana").glob("*.json"))
    if args.prometheus:
        for d in dashboards:
            print(draw(args.prometheus.rstrip("/"), d, args.out, args.minutes))
        return 0
    spec = importlib.util.spec_from_file_location("dashboards_live", HERE / "live.py")
    assert spec and spec.loader
    live = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = live  # its dataclasses look their module up there
    spec.loader.exec_module(live)
    with tempfile.TemporaryDirectory(prefix="pictures") as work:
        try:
            with live.live_cluster(Path(work)) as cluster:
                print(f"scraping for {args.minutes:g} min: {cluster.prometheus_url}", flush=True)
                time.sleep(args.minutes * 60)
                for d in dashboards:
                    print(draw(cluster.prometheus_url, d, args.out, args.minutes))
        except live.LiveError as exc:
            print(f"pictures: error: {exc}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
