"""CPU cost of the simulated cluster itself (issue 15): CPU seconds per minute that the emulated
exporters, the slurmd, slurmctld, munged and Prometheus of an idle `opsctl sim` use.

    .venv/bin/python bench/emulation_cost.py [--nodes 64] [--minutes 2] [--settle-s 30] [--json]

The sim runs with its monitoring (one process emulating a dcgm-exporter and a node_exporter per
node, scraped every 5 s by a real Prometheus). After --settle-s (start-up and the first scrapes
left out), each process's user + system CPU seconds (/proc/PID/stat, its threads included) are read
at the start and the end of --minutes; the figure is their difference per minute, per group, and
as a share of one core. No job runs: this is what the emulation costs before any test does work.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass

from procstat import cpu_seconds, rss_kib
from simrig import Rig


@dataclass
class Group:
    name: str
    processes: int
    cpu_s_per_min: float
    core_share: float  # cpu_s_per_min / 60: fraction of one core
    rss_mib: float


def group_of(proc: str) -> str:
    """The group a sim process belongs to: every slurmd-<node> is one "slurmd" group."""
    return "slurmd" if proc.startswith("slurmd-") else proc


def per_minute(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """CPU seconds per minute of each process seen at both reads (one that restarted or exited
    between them is left out rather than counted negative)."""
    out = {}
    for name, start in before.items():
        end = after.get(name)
        if end is not None and end >= start:
            out[name] = (end - start) * 60.0 / seconds
    return out


def measure(nodes: int, minutes: float, settle_s: float) -> dict[str, object]:
    rig = Rig.up(nodes, prefix="emu")
    try:
        time.sleep(settle_s)
        pids = {}
        for name in rig.sim.procs.names():
            info = rig.sim.procs.info(name)
            if info is not None:
                pids[name] = info.pid

        def read() -> dict[str, float]:
            return {n: c for n, p in pids.items() if (c := cpu_seconds(p)) is not None}

        t0, before = time.monotonic(), read()
        time.sleep(minutes * 60)
        after, seconds = read(), time.monotonic() - t0
        rates = per_minute(before, after, seconds)
        rss = {n: r for n, p in pids.items() if (r := rss_kib(p)) is not None}
    finally:
        rig.down(keep=False)
    cpu: dict[str, float] = defaultdict(float)
    mem: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for name, rate in rates.items():
        g = group_of(name)
        cpu[g] += rate
        mem[g] += rss.get(name, 0) / 1024
        count[g] += 1
    groups = [Group(g, count[g], round(cpu[g], 2), round(cpu[g] / 60, 3), round(mem[g], 1))
              for g in sorted(cpu, key=lambda g: -cpu[g])]
    total = sum(cpu.values())
    return {"nodes": nodes, "window_s": round(seconds, 1), "settle_s": settle_s,
            "groups": [asdict(g) for g in groups], "total_cpu_s_per_min": round(total, 2),
            "total_core_share": round(total / 60, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--settle-s", type=float, default=30.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.minutes <= 0 or args.settle_s < 0:
        ap.error("--minutes must be positive and --settle-s not negative")
    r = measure(args.nodes, args.minutes, args.settle_s)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return
    print(f"emulation cost: idle {r['nodes']}-node sim with monitoring, {r['window_s']} s window: "
          f"{r['total_cpu_s_per_min']} CPU s/min ({r['total_core_share']:.0%} of one core)")
    for g in r["groups"]:  # type: ignore[attr-defined]
        print(f"  {g['name']} ({g['processes']} proc): {g['cpu_s_per_min']} CPU s/min "
              f"({g['core_share']:.1%} of a core), RSS {g['rss_mib']} MiB")


if __name__ == "__main__":
    main()
