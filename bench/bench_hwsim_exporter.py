"""How much one exporter process costs for a 64-node sim: scrape latency over real HTTP.

    .venv/bin/python bench/bench_hwsim_exporter.py [--nodes 64] [--rounds 5]

Prints the median and p95 latency of one node's scrape and the wall time of scraping every node
once (sequentially, as the worst case of Prometheus's spread-out scrapes arriving together).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from opsctl.hwsim.exporter import MultiExporter, NodeSpec
from opsctl.hwsim.metrics import load_collectors

# the dcgm role's counters file rendered for the pinned DCGM (kept equal to the render by a test)
SHIPPED = Path(__file__).resolve().parents[1] / "tests" / "golden" / "production" / "dcgm-counters.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hwsim-bench") as tmp:
        nodes = [NodeSpec(f"gpu-{i:03d}") for i in range(1, args.nodes + 1)]
        exp = MultiExporter(Path(tmp), nodes, counters=load_collectors(SHIPPED))
        exp.start()
        sup = threading.Thread(target=exp.supervise, daemon=True)
        sup.start()
        try:
            # both endpoints of every node: dcgm-exporter and node_exporter
            ports = [p for node in exp.ports().values() for p in node.values()]
            one: list[float] = []
            sweeps: list[float] = []
            size = 0
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                for port in ports:
                    t = time.perf_counter()
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                        size = len(r.read())
                    one.append(time.perf_counter() - t)
                sweeps.append(time.perf_counter() - t0)
        finally:
            exp.stop()
    one.sort()
    p95 = one[int(len(one) * 0.95) - 1]
    print(f"nodes={args.nodes} scrapes={len(one)} bytes_per_scrape={size}")
    print(f"scrape latency: median {statistics.median(one) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
    print(f"all nodes once: median {statistics.median(sweeps):.2f} s (Prometheus scrapes each every 5 s)")


if __name__ == "__main__":
    main()
