"""Slurm commands per pass of the remediation service, and the pass time, on a simulated cluster.

    .venv/bin/python bench/bench_slurm_calls.py [--nodes 64 [512]] [--passes 10] [--interval 15]
        [--scrape-interval 5] [--no-drain] [--json] [--keep]

For each --nodes, a simulated cluster (bench/simrig.py: real slurmctld and --nodes real slurmd,
emulated dcgm-exporter/node exporters scraped by a real Prometheus) and `opsctl remediator run` as
a subprocess, as systemd would run it, with the product's [health] policy. The service runs with a
PATH shim in front: a directory holding one bash wrapper per Slurm client binary (scontrol, sinfo,
squeue, sacct, sbatch, scancel, srun and the other s* clients installed) that appends one line
(time, binary, its argv) to a log and `exec`s the real binary by its absolute path. Every Slurm
command the service runs, in any of its child processes, is logged; nothing else uses the shim.

Commands are attributed to passes by time: the service writes its status file (pass number, start
time, duration) after every pass, polled here every 0.1 s; pass N owns the commands logged from its
start to the start of pass N+1 (the service runs nothing between passes but its sleep). The first
pass is reported apart (it also probes Slurm's JSON format); the next --passes passes in which every
node was judged OK are the healthy figures. Then XID 79 is injected on one node (opsctl.sim.monitoring
.inject, as bench/fault_to_drain.py does); the pass whose decisions drain it is the draining pass,
and the two passes after it are reported as "after drain" (one node drained, kept).

Pass time is the service's own record (status file duration_s: collect, judge, decide, act) of the
healthy passes: median and max. The shim itself costs one bash start per command; its overhead per
command is measured (shim vs direct `scontrol --version`, 20 each) and reported beside it.

--scrape-interval replaces the sim's 5 s Prometheus scrape interval (monitoring.SCRAPE_INTERVAL_S,
set in this process before the sim renders its config): 1024 emulated endpoints on 2 cores do not all
answer within 5 s (docs/benchmarks.md), so 512 nodes want about 20 s.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simrig import Rig, Service, wait

from opsctl.sim import monitoring

# Slurm's client binaries; those installed get a wrapper (the first seven are the ones opsctl uses)
SLURM_CLIENTS = ("scontrol", "sinfo", "squeue", "sacct", "sbatch", "scancel", "srun", "salloc", "sacctmgr",
                 "sstat", "sprio", "sshare", "sdiag", "sreport", "strigger", "sattach", "sbcast")
POLL_S = 0.1
XID_FAULT = "xid=79,gpu=2"
AFTER_DRAIN_PASSES = 2

SHIM = """#!/bin/bash
printf -v argv '%q ' "$@"
printf '%s\\t%s\\t%s\\n' "$EPOCHREALTIME" {name} "$argv" >> {log}
exec {real} "$@"
"""


# -- the shim ----------------------------------------------------------------------------------
def build_shim(shim_dir: Path, log: Path) -> dict[str, str]:
    """One wrapper per installed Slurm client in ``shim_dir``; binary -> the real one's path."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    real: dict[str, str] = {}
    for name in SLURM_CLIENTS:
        found = shutil.which(name)
        if found is None:
            continue
        real[name] = str(Path(found).resolve())
        wrapper = shim_dir / name
        wrapper.write_text(SHIM.format(name=name, log=shlex.quote(str(log)), real=shlex.quote(real[name])))
        wrapper.chmod(0o755)
    log.touch()
    return real


def shim_overhead_ms(shim_dir: Path, real: str, runs: int = 20) -> tuple[float, float]:
    """(median ms of `scontrol --version` through the shim, median ms direct)."""
    def timed(exe: str) -> float:
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([exe, "--version"], capture_output=True, check=False, timeout=30)
            samples.append((time.perf_counter() - t0) * 1000)
        return statistics.median(samples)

    return timed(str(shim_dir / "scontrol")), timed(real)


@dataclass
class Call:
    ts: float
    binary: str
    args: list[str]


def read_calls(log: Path) -> list[Call]:
    calls = []
    for line in log.read_text().splitlines():
        ts, binary, argv = line.split("\t", 2)
        calls.append(Call(float(ts), binary, shlex.split(argv)))
    return calls


def command_key(call: Call) -> str:
    """The binary and its subcommand: `scontrol show node`, `scontrol update`, `sinfo --json`, `squeue`."""
    words = [a for a in call.args if not a.startswith("-")]
    if call.binary == "scontrol" and words:
        verb = words[0].lower()
        if verb == "show" and len(words) > 1:
            return f"scontrol show {words[1].lower()}"
        return f"scontrol {verb}"
    return f"{call.binary} --json" if "--json" in call.args else call.binary


def command_line(call: Call) -> str:
    """The command with numbers and node names folded, so that repeats of one command group together."""
    import re

    text = " ".join([call.binary, *call.args])
    text = re.sub(r"gpu-\[?[0-9,\-\[\]]+\]?", "<nodes>", text)
    return re.sub(r"\b\d+\b", "<n>", text)[:160]


# -- the service, started with the shim first on PATH ------------------------------------------
@dataclass
class ShimmedService(Service):
    shim_dir: Path = field(default_factory=Path)

    def start(self) -> None:
        env = dict(self.sim.env)
        env["PATH"] = f"{self.shim_dir}:{env.get('PATH', '')}"
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "opsctl", "--config", str(self.sim.config_path), "remediator", "run"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )


@dataclass
class PassLog:
    """Every pass the service reported in its status file, by number (polled)."""

    svc: Service
    passes: dict[int, dict[str, Any]] = field(default_factory=dict)

    def poll(self) -> None:
        st = self.svc.status()  # SystemExit if the service died
        if st is not None:
            self.passes.setdefault(int(st["number"]), st)

    def last(self) -> int:
        return max(self.passes, default=0)

    def wait(self, pred: Any, timeout: float, what: str) -> Any:
        """simrig.wait, reading the status file before each look."""

        def polled() -> Any:
            self.poll()
            return pred()

        return wait(polled, timeout, what, interval=POLL_S)

    def wait_number(self, number: int, timeout: float) -> None:
        self.wait(lambda: self.last() >= number, timeout, f"pass {number}")

    def all_ok(self, number: int, nodes: int) -> bool:
        st = self.passes.get(number)
        return bool(st and st["ok"] and st["counts"].get("OK") == nodes)


def calls_of(calls: list[Call], log: PassLog, number: int) -> list[Call]:
    """The commands of pass ``number``: from its start to the start of the next pass."""
    if number not in log.passes or number + 1 not in log.passes:
        raise SystemExit(f"bench: pass {number} or {number + 1} not seen in the status file")
    start, end = log.passes[number]["time"], log.passes[number + 1]["time"]
    return [c for c in calls if start <= c.ts < end]


def breakdown(per_pass: list[list[Call]]) -> dict[str, Any]:
    """Commands per pass by binary+subcommand over a set of passes, with whether every pass ran the same."""
    keys = sorted({command_key(c) for p in per_pass for c in p})
    counts = {k: [sum(1 for c in p if command_key(c) == k) for p in per_pass] for k in keys}
    totals = [len(p) for p in per_pass]
    lines: Counter[str] = Counter(command_line(c) for p in per_pass for c in p)
    return {
        "passes": len(per_pass),
        "per_pass": {k: v[0] if len(set(v)) == 1 else v for k, v in counts.items()},
        "total_per_pass": totals[0] if len(set(totals)) == 1 else totals,
        "stable": len(set(totals)) == 1 and all(len(set(v)) == 1 for v in counts.values()),
        "command_lines": {k: round(v / len(per_pass), 2) for k, v in lines.most_common()},
    }


def pass_times(log: PassLog, numbers: list[int]) -> dict[str, Any]:
    d = [float(log.passes[n]["duration_s"]) for n in numbers]
    return {"median_s": round(statistics.median(d), 3), "max_s": round(max(d), 3),
            "min_s": round(min(d), 3), "all_s": d}


# -- one node count ------------------------------------------------------------------------------
def measure(rig: Rig, svc: ShimmedService, shim_log: Path, passes: int, drain: bool,
            healthy_timeout: float) -> dict[str, Any]:
    nodes = rig.sim.num_nodes
    log = PassLog(svc)
    log.wait(lambda: log.passes.get(1), 300, "the service's first pass")
    first_ok = log.wait(lambda: next((n for n in sorted(log.passes) if log.all_ok(n, nodes)), None),
                        healthy_timeout, "a pass judging every node OK")
    healthy: list[int] = []
    seen = first_ok + 1
    deadline = time.monotonic() + healthy_timeout + passes * (svc_interval(rig) + 60)
    while len(healthy) < passes:  # the next `passes` all-OK passes after the first one
        log.wait_number(seen, max(1.0, deadline - time.monotonic()))
        if log.all_ok(seen, nodes):
            healthy.append(seen)
        seen += 1
    log.wait_number(healthy[-1] + 1, 120)
    out: dict[str, Any] = {"first_pass": _pass_summary(log, read_calls(shim_log), 1)}
    result: dict[str, Any] = {}
    if drain:
        node = rig.sim.node_names[len(rig.sim.node_names) // 2]
        injected = time.time()
        monitoring.inject(rig.sim, node, XID_FAULT)

        def drained() -> int | None:
            return next((n for n, st in sorted(log.passes.items()) if st["time"] > injected and any(
                d["action"] == "drain" and d["node"] == node for d in st.get("decisions", []))), None)

        number = log.wait(drained, 180, f"a pass draining {node}")
        log.wait_number(number + AFTER_DRAIN_PASSES + 1, 120 + AFTER_DRAIN_PASSES * 60)
        result = {"node": node, "pass": number, "inject_to_pass_start_s": round(
            log.passes[number]["time"] - injected, 2)}
    calls = read_calls(shim_log)
    out["startup_commands"] = [command_line(c) for c in calls if c.ts < log.passes[1]["time"]]
    out["healthy"] = breakdown([calls_of(calls, log, n) for n in healthy])
    out["healthy"]["pass_numbers"] = healthy
    out["healthy"]["pass_time"] = pass_times(log, healthy)
    skipped = [n for n in range(first_ok + 1, healthy[-1] + 1) if n not in healthy]
    out["healthy"]["skipped_not_all_ok"] = {n: log.passes.get(n, {}).get("counts") for n in skipped}
    if drain:
        number = result["pass"]
        result.update(_pass_summary(log, calls, number))
        after = list(range(number + 1, number + 1 + AFTER_DRAIN_PASSES))
        result["after_drain"] = breakdown([calls_of(calls, log, n) for n in after])
        result["after_drain"]["pass_time"] = pass_times(log, after)
        out["draining"] = result
    out["all_passes_seen"] = log.last()
    out["failed_passes"] = sorted(n for n, st in log.passes.items() if not st["ok"])
    return out


def svc_interval(rig: Rig) -> float:
    import tomllib

    return float(tomllib.loads(rig.sim.config_path.read_text())["remediator"]["interval"])


def _pass_summary(log: PassLog, calls: list[Call], number: int) -> dict[str, Any]:
    st = log.passes[number]
    mine = calls_of(calls, log, number)
    return {
        "number": number,
        "counts": st["counts"],
        "duration_s": st["duration_s"],
        "decisions": [{k: d.get(k) for k in ("node", "action", "code", "result")} for d in st["decisions"]],
        "per_pass": dict(sorted(Counter(command_key(c) for c in mine).items())),
        "total": len(mine),
        "command_lines": [command_line(c) for c in mine],
    }


def run(nodes: int, passes: int, interval: float, scrape_interval: int, drain: bool,
        keep: bool) -> dict[str, Any]:
    monitoring.SCRAPE_INTERVAL_S = scrape_interval  # read when the sim renders prometheus.yml
    t0 = time.monotonic()
    rig = Rig.up(nodes, prefix="bsc")
    print(f"bench: {nodes}-node sim up in {rig.up_s:.0f}s ({rig.dir})", file=sys.stderr)
    base = rig.service("calls")
    shim_dir = base.dir / "shim"
    shim_log = base.dir / "slurm-calls.log"
    svc = ShimmedService(base.sim, base.dir, base.nodes, shim_dir=shim_dir)
    ok = False
    try:
        svc.configure(interval)
        real = build_shim(shim_dir, shim_log)
        via_shim, direct = shim_overhead_ms(shim_dir, real["scontrol"])
        shim_log.write_text("")  # the overhead runs are not the service's
        svc.start()
        healthy_timeout = 120 + 2 * interval + 4 * scrape_interval + nodes * 0.5
        out = measure(rig, svc, shim_log, passes, drain, healthy_timeout)
        ok = True
    finally:
        svc.stop()
        rig.down(keep or not ok)
    out.update({
        "nodes": nodes,
        "interval_s": interval,
        "scrape_interval_s": scrape_interval,
        "sim_up_s": round(rig.up_s, 1),
        "wrapped": sorted(real),
        "shim_ms": round(via_shim, 2),
        "direct_ms": round(direct, 2),
        "wall_s": round(time.monotonic() - t0, 1),
    })
    return out


# -- report --------------------------------------------------------------------------------------
def print_text(r: dict[str, Any]) -> None:
    h = r["healthy"]
    pt = h["pass_time"]
    print(f"{r['nodes']} nodes (service interval {r['interval_s']} s, scrape {r['scrape_interval_s']} s, "
          f"sim up in {r['sim_up_s']} s): {h['passes']} healthy passes {h['pass_numbers'][0]}-"
          f"{h['pass_numbers'][-1]}, {h['total_per_pass']} Slurm commands per pass"
          f"{'' if h['stable'] else ' (NOT the same every pass)'}")
    for k, v in h["per_pass"].items():
        print(f"    {v!s:>4}  {k}")
    print(f"  pass time: median {pt['median_s']} s, max {pt['max_s']} s (min {pt['min_s']} s); shim "
          f"{r['shim_ms']} ms vs {r['direct_ms']} ms direct per command")
    fp = r["first_pass"]
    print(f"  first pass: {fp['total']} commands {fp['per_pass']}, {fp['duration_s']} s")
    d = r.get("draining")
    if d:
        print(f"  draining pass {d['pass']} ({d['node']}, XID 79): {d['total']} commands {d['per_pass']}, "
              f"{d['duration_s']} s; decisions {d['decisions']}")
        a = d["after_drain"]
        print(f"  after drain ({a['passes']} passes): {a['total_per_pass']} commands per pass "
              f"{a['per_pass']}")
    if r["failed_passes"]:
        print(f"  failed passes: {r['failed_passes']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", action="extend", default=None,
                    help="node counts, one sim each (repeatable; default 64)")
    ap.add_argument("--passes", type=int, default=10, help="healthy passes measured per node count")
    ap.add_argument("--interval", type=float, default=15.0, help="the service's seconds between passes")
    ap.add_argument("--scrape-interval", type=int, default=monitoring.SCRAPE_INTERVAL_S,
                    help="Prometheus's scrape interval in seconds (the sim's is 5)")
    ap.add_argument("--no-drain", action="store_true", help="skip the XID 79 draining pass")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    ap.add_argument("--keep", action="store_true", help="keep the sim's directory (logs, shim log)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the sim down on SIGTERM too
    results = [run(n, args.passes, args.interval, args.scrape_interval, not args.no_drain, args.keep)
               for n in args.nodes or [64]]
    if args.json:
        print(json.dumps(results, sort_keys=True))
        return
    for r in results:
        print_text(r)


if __name__ == "__main__":
    main()
