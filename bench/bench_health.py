"""Health benchmarks (targets from the health issue).

    .venv/bin/python bench/bench_health.py query [--nodes 64] [--runs 15] [--scrape-interval 5]
    .venv/bin/python bench/bench_health.py drain [--trials 5]

query: ``opsctl health --json`` (a fresh process each run, as on-call runs it) over 64 simulated
nodes x 8 GPUs through a real Prometheus scraping the hwsim exporters. Target: median < 1 s.

drain: fault-to-drain latency on the simulated cluster (8 real slurmd, real slurmctld, Prometheus
scraping every 5 s): inject XID 79 into a node's simulated hardware, run health passes back to back
with remediation (as ``opsctl watch --remediate`` would), stop when Slurm has the node drained.
Target: within one scrape interval plus 5 s (10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def _wait(pred, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not reached within {timeout:.0f}s")
        time.sleep(0.5)


def bench_query(nodes: int, runs: int, scrape_interval: int, profile: bool = False,
                record_to: Path | None = None) -> None:
    from opsctl.hwsim.exporter import MultiExporter, NodeSpec
    from opsctl.hwsim.metrics import load_collectors
    from opsctl.hwsim.state import make_node, save, state_path
    from opsctl.sim.cluster import free_ports
    from opsctl.sim.monitoring import EXPORTER_JOBS, render_configs, sim_inventory, targets_health

    names = [f"gpu-{i:03d}" for i in range(1, nodes + 1)]
    with tempfile.TemporaryDirectory(prefix="hbench") as tmp:
        root = Path(tmp)
        for n in names:
            save(make_node(n), state_path(root / "hw", n))
        # the production roles' counters file and prometheus.yml for these nodes, as the sim renders
        ports = free_ports(2 * nodes + 2)
        port, remediator = ports[-2:]
        exporters = {n: {"dcgm": ports[2 * i], "node": ports[2 * i + 1]} for i, n in enumerate(names)}
        inventory = sim_inventory(exporters, root, prometheus_port=port, remediator_port=remediator)
        # Emulating 512 nodes' exporters in one Python process on 2 cores takes seconds per round,
        # more than the sim's 5 s interval: a longer one measures the query, not the emulation.
        inventory["all"]["vars"]["prometheus_scrape_interval"] = f"{scrape_interval}s"
        render_configs(root, inventory)
        specs = [NodeSpec(n, p["dcgm"], p["node"]) for n, p in exporters.items()]
        exp = MultiExporter(root / "hw", specs, counters=load_collectors(root / "dcgm-counters.csv"))
        exp.start()
        threading.Thread(target=exp.supervise, daemon=True).start()
        prom = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait(
                lambda: _ready(url)
                and sum(1 for (job, _), h in targets_health(url).items() if job in EXPORTER_JOBS.values()
                        and h == "up") == 2 * nodes,
                120 + 4 * scrape_interval,
                "all targets up",
            )
            cfg = root / "opsctl.toml"
            cfg.write_text(
                f'[prometheus]\nurl = "{url}"\n[health]\nnodes = "gpu-[001-{nodes:03d}]"\n'
                "stale_after = 30.0\n"
            )
            argv = [sys.executable, "-m", "opsctl", "--config", str(cfg), "health", "--json"]
            _wait(lambda: subprocess.run(argv, capture_output=True).returncode == 0, 60, "a healthy pass")
            if record_to is not None:
                from promreplay import record

                from opsctl.evidence.prometheus import PrometheusSource

                rec = record(url, PrometheusSource(url).queries(), nodes)
                rec.save(record_to)
                print(f"recorded the {len(rec.queries)} answers to {record_to}; Prometheus took "
                      + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in rec.seconds.items()))
            times, gpus, failed = [], 0, []
            for _ in range(runs):
                t0 = time.perf_counter()
                p = subprocess.run(argv, capture_output=True, text=True)
                times.append(time.perf_counter() - t0)
                if p.returncode != 0:  # e.g. Prometheus slower than the client's timeout: count it
                    failed.append(p.stderr.strip()[-200:] or f"exit {p.returncode}")
                    continue
                doc = json.loads(p.stdout)
                gpus = sum(
                    next(v["evidence"]["seen"] for v in n["verdicts"] if v["code"] == "gpu-count")
                    for n in doc["nodes"]
                )
            # the same pass in-process: collect + judge only, without interpreter start-up
            from opsctl.checks import judge, load_thresholds
            from opsctl.errors import Unreachable
            from opsctl.evidence.prometheus import PrometheusSource

            src, th = PrometheusSource(url, stale_after=30.0), load_thresholds()
            inproc = []
            for _ in range(runs):
                t0 = time.perf_counter()
                try:
                    judge(src.collect(names, time.time()), th, time.time())
                except Unreachable as exc:
                    failed.append(f"in-process: {exc}")
                inproc.append(time.perf_counter() - t0)
            if profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.runcall(lambda: judge(src.collect(names, time.time()), th, time.time()))
                pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        finally:
            prom.terminate()
            prom.wait(timeout=30)
            exp.stop()
    print(
        f"query: {nodes} nodes, {gpus} GPUs, {runs} runs of `opsctl health --json` (fresh process each),"
        f" Prometheus scraping every {scrape_interval} s"
    )
    print(
        f"  median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
        f"(target < 1 s: ratio {statistics.median(times) / 1.0:.2f})"
    )
    print(f"  in-process collect+judge: median {statistics.median(inproc) * 1000:.0f} ms")
    if failed:
        print(f"  {len(failed)} runs failed (their time is counted): {failed[0]}")


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench_replay(path: Path, runs: int, profile: bool, as_json: bool) -> None:
    """`opsctl health --json` (a fresh process per run) against a loopback server answering from a
    recording: the client's own wall and CPU time, without the Prometheus server or the emulation.
    Then collect+judge in-process (wall and CPU) and, with --profile, where that time goes."""
    from promreplay import Recording, ReplayServer

    from opsctl.health import service

    if not path.is_file():
        raise SystemExit(f"bench: no recording at {path} (make one with `query --record FILE`)")
    rec = Recording.load(path)
    names = [f"gpu-{i:03d}" for i in range(1, rec.nodes + 1)]
    with tempfile.TemporaryDirectory(prefix="hreplay") as tmp, ReplayServer(rec) as srv:
        cfg = Path(tmp) / "opsctl.toml"
        cfg.write_text(
            f'[prometheus]\nurl = "{srv.url}"\n[health]\nnodes = "gpu-[001-{rec.nodes:03d}]"\n'
            f'stale_after = 30.0\nstate_file = "{tmp}/state.json"\ndecision_log = "{tmp}/d.jsonl"\n'
        )
        argv = [sys.executable, "-m", "opsctl", "--config", str(cfg), "health", "--json"]
        # as an installed opsctl runs: from cached bytecode (kept out of the tree), even where the
        # environment says not to write any; the first run, which compiles, is not counted
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        subprocess.run(argv, capture_output=True, env=env, check=False)
        walls, cpus = [], []
        for _ in range(runs):
            c0, t0 = _child_cpu(), time.perf_counter()
            p = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            walls.append(time.perf_counter() - t0)
            cpus.append(_child_cpu() - c0)
            if p.returncode != 0:
                raise SystemExit(f"bench: `opsctl health` exited {p.returncode}: {p.stderr.strip()[-300:]}")
        doc = json.loads(p.stdout)
        if len(doc["nodes"]) != rec.nodes:
            raise SystemExit(f"bench: {len(doc['nodes'])} nodes judged, not {rec.nodes}")
        ctx = service.load_context(str(cfg))
        src = service.make_source(ctx, "prometheus")
        in_wall, in_cpu = [], []
        for _ in range(runs):
            c0, t0 = time.process_time(), time.perf_counter()
            service.run_health(ctx, names, src)
            in_wall.append(time.perf_counter() - t0)
            in_cpu.append(time.process_time() - c0)
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.runcall(lambda: json.dumps(service.run_health(ctx, names, src).to_json(), indent=1,
                                            sort_keys=True))
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    med = statistics.median
    out = {"nodes": rec.nodes, "runs": runs,
           "cli_wall_s": round(med(walls), 3), "cli_cpu_s": round(med(cpus), 3),
           "cli_wall_min_s": round(min(walls), 3), "cli_wall_max_s": round(max(walls), 3),
           "inproc_wall_s": round(med(in_wall), 3), "inproc_cpu_s": round(med(in_cpu), 3),
           "recorded_prometheus_s": {k: round(v, 3) for k, v in rec.seconds.items()}}
    if as_json:
        print(json.dumps(out, sort_keys=True))
        return
    print(f"replay: {rec.nodes} nodes, {runs} runs of `opsctl health --json` against recorded answers")
    print(f"  CLI: wall median {out['cli_wall_s']} s (min {out['cli_wall_min_s']}, "
          f"max {out['cli_wall_max_s']}), "
          f"CPU median {out['cli_cpu_s']} s")
    print(f"  in-process run_health: wall median {out['inproc_wall_s']} s, "
          f"CPU median {out['inproc_cpu_s']} s")
    print(f"  Prometheus took (when recorded, s): {out['recorded_prometheus_s']}")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def bench_drain(trials: int) -> None:
    from opsctl.health import service
    from opsctl.sim import monitoring
    from opsctl.sim.cluster import SimCluster

    state_dir = Path(tempfile.mkdtemp(prefix="hbd", dir="/tmp"))
    sim = SimCluster(nodes=8, state_dir=state_dir, addons=["monitoring"])
    latencies: list[float] = []
    try:
        sim.up()
        for trial in range(trials):
            work = Path(tempfile.mkdtemp(prefix="hbdt"))
            sim.set_config("health", stale_after=15.0, state_file=str(work / "s.json"),
                           decision_log=str(work / "d.jsonl"))
            cfg = sim.config_path
            ctx = service.load_context(str(cfg))
            nodes = service.resolve_nodes(ctx, None)
            src = service.make_source(ctx, "prometheus")
            _wait(
                lambda c=ctx, n=nodes, s=src: service.run_health(c, n, s).status == "OK",
                60,
                "a healthy cluster",
            )
            node = nodes[trial % len(nodes)]
            t0 = time.monotonic()
            monitoring.inject(sim, node, "xid=79,gpu=1")
            while True:
                r = service.run_health(ctx, nodes, src, remediate=True)
                if any(d.node == node and d.action == "drain" and d.result == "applied" for d in r.decisions):
                    latencies.append(time.monotonic() - t0)
                    break
                if time.monotonic() - t0 > 60:
                    raise SystemExit("bench: no drain within 60 s")
            monitoring.heal(sim, node)
            sim.reset()
            shutil.rmtree(work, ignore_errors=True)
    finally:
        sim.down()
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"drain: {trials} trials, 8-node sim, 5 s scrape interval, passes back to back")
    print(
        f"  fault-to-drain median {statistics.median(latencies):.1f} s, max {max(latencies):.1f} s "
        f"(target <= 10 s: ratio {statistics.median(latencies) / 10.0:.2f}); all: "
        + ", ".join(f"{x:.1f}" for x in latencies)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what")
    q = sub.add_parser("query")
    q.add_argument("--nodes", type=int, default=64)
    q.add_argument("--runs", type=int, default=15)
    q.add_argument("--scrape-interval", type=int, default=5, help="seconds (the sim's is 5)")
    q.add_argument("--profile", action="store_true", help="print where one in-process pass spends its time")
    q.add_argument("--record", type=Path, metavar="FILE",
                   help="also save Prometheus's answers to the health queries (for `replay`)")
    r = sub.add_parser("replay", help="`opsctl health --json` against recorded answers (no emulation)")
    r.add_argument("recording", type=Path)
    r.add_argument("--runs", type=int, default=15)
    r.add_argument("--profile", action="store_true", help="print where one in-process pass spends its time")
    r.add_argument("--json", action="store_true")
    d = sub.add_parser("drain")
    d.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    if args.what == "replay":
        bench_replay(args.recording, args.runs, args.profile, args.json)
        return
    if args.what in (None, "query"):
        bench_query(
            getattr(args, "nodes", 64), getattr(args, "runs", 15), getattr(args, "scrape_interval", 5),
            getattr(args, "profile", False), getattr(args, "record", None),
        )
    if args.what in (None, "drain"):
        bench_drain(getattr(args, "trials", 5))


if __name__ == "__main__":
    main()
