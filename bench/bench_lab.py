"""Benchmark the machine lab: cached `lab up`, first and second converge, memory per idle machine.

Run as root on the 2-core machine, with no other lab up:
    .venv/bin/python bench/bench_lab.py --nodes 3 --repeat 3 [--converge]
Targets: cached up of 3+1 machines <= 60 s; first converge <= 10 min; second converge <= 3 min.
The image is built (or topped up) by a warm-up run that is not counted. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opsctl.lab import lab as labmod
from opsctl.lab import machines
from opsctl.lab.config import from_env
from opsctl.lab.converge import run_playbook


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """RSS of a process and all its descendants (an nspawn machine: nspawn, its init, services)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_kib(p)
        todo += _children(p)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--converge", action="store_true", help="also time site.yml twice on the lab")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lab-") as tmp:
        os.environ["OPSCTL_LAB_STATE"] = str(Path(tmp) / "state")
        cfg = from_env(args.nodes)
        inventory = Path(tmp) / "inventory"
        result: dict[str, object] = {
            "machine": f"{platform.node()} {os.cpu_count()} CPUs, {platform.release()}",
            "nodes": f"{args.nodes}+1",
        }
        try:
            labmod.up(cfg, inventory)  # warm-up: builds or tops up the image cache
            labmod.down(cfg, inventory)
            ups = []
            for i in range(args.repeat):
                t0 = time.perf_counter()
                labmod.up(cfg, inventory)
                ups.append(time.perf_counter() - t0)
                if i != args.repeat - 1:
                    labmod.down(cfg, inventory)
            result["cached_up_s"] = {
                "runs": [round(u, 2) for u in ups],
                "median": round(statistics.median(ups), 2),
            }
            time.sleep(10)  # let the machines settle to idle
            rss = {p.machine: tree_rss_kib(p.pid) for p in machines.running(cfg)}
            result["idle_rss_mib_per_machine"] = {k: round(v / 1024, 1) for k, v in rss.items()}
            if args.converge:
                repo = labmod.REPO_ROOT
                for label in ("first_converge_s", "second_converge_s"):
                    t0 = time.perf_counter()
                    res = run_playbook(repo, inventory)
                    result[label] = round(time.perf_counter() - t0, 1)
                    result[label.replace("_s", "_failed_hosts")] = res.failed_hosts
                    result[label.replace("_s", "_changed")] = {h: r.changed for h, r in res.recap.items()}
                rss = {p.machine: tree_rss_kib(p.pid) for p in machines.running(cfg)}
                result["converged_rss_mib_per_machine"] = {k: round(v / 1024, 1) for k, v in rss.items()}
        finally:
            labmod.down(cfg, inventory)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
