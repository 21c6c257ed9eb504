"""Fault-to-drain latency of the remediation service (issue 10: target scrape interval + 2 s).

    .venv/bin/python bench/fault_to_drain.py [--nodes 64] [--trials 7] [--interval 1] [--json]

A simulated cluster of --nodes real slurmd with a real slurmctld, emulated dcgm-exporter/node
exporters and a real Prometheus scraping every 5 s; `opsctl remediator run` running by itself as
a subprocess, as systemd would run it. Each trial waits a random part of a scrape interval (so the
fault lands anywhere in the scrape cycle), injects XID 79 into one node's simulated hardware, and
polls Slurm every 0.1 s until that node is drained; the node is then healed and resumed by hand.
Each trial uses another node. The figure is wall time from the injection to Slurm's drain, which
includes waiting for the next scrape, the service's next pass and the pass itself.

The brake and the storm rule are set out of the way ([health] max_drains, storm_min_nodes): they
would hold a sequence of drains of the same XID, which is their job, not what this measures.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def _wait(pred, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not reached within {timeout:.0f}s")
        time.sleep(interval)


def _node_state(env: dict[str, str], node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], env=env, capture_output=True,
                         text=True, timeout=30, check=False)
    return out.stdout.strip()


def _status_after(state_dir: Path, since: float, fail: int) -> bool:
    """A pass that started after ``since`` ran and counted ``fail`` failing nodes."""
    try:
        st = json.loads((state_dir / "status.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(st["ok"]) and st["time"] > since and st["counts"].get("FAIL", 0) == fail


def _pass_seconds(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of the service's pass duration histogram."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    got = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
           if s.name.startswith("opsctl_remediator_pass_duration_seconds_")}
    return got.get("opsctl_remediator_pass_duration_seconds_sum", 0.0), got.get(
        "opsctl_remediator_pass_duration_seconds_count", 0.0)


def run(nodes: int, trials: int, interval: float, seed: int, keep: bool) -> dict[str, object]:
    from opsctl.sim import monitoring
    from opsctl.sim.cluster import SimCluster, free_ports

    if trials > nodes:
        raise SystemExit("bench: --trials must not exceed --nodes (one node per trial)")
    rng = random.Random(seed)
    state_dir = Path(tempfile.mkdtemp(prefix="ftd", dir="/tmp"))  # short: munge's socket lives inside
    sim = SimCluster(nodes=nodes, state_dir=state_dir, addons=["monitoring"])
    latencies: list[float] = []
    proc: subprocess.Popen[bytes] | None = None
    try:
        t_up = time.monotonic()
        sim.up()
        up_s = time.monotonic() - t_up
        (port,) = free_ports(1)
        sim.set_config("health", state_file=str(state_dir / "bench-state.json"),
                       decision_log=str(state_dir / "bench-decisions.jsonl"),
                       max_drains=2 * trials + 1, max_fraction=1.0, storm_min_nodes=nodes)
        sim.set_config("remediator", interval=interval, metrics_address=f"127.0.0.1:{port}",
                       pause_file=str(state_dir / "paused.json"), status_file=str(state_dir / "status.json"))
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        log = open(state_dir / "remediator.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "opsctl", "--config", str(sim.config_path), "remediator", "run"],
            env=sim.env, stdout=log, stderr=subprocess.STDOUT,
        )

        def healthy_pass() -> bool:
            if proc is not None and proc.poll() is not None:
                raise SystemExit(f"bench: the service exited; see {state_dir / 'remediator.log'}")
            try:
                st = json.loads((state_dir / "status.json").read_text())
            except (OSError, ValueError):
                return False
            return bool(st["ok"]) and st["counts"].get("OK") == nodes

        _wait(healthy_pass, 120, "a healthy pass of the service")
        names = sim.node_names
        order = rng.sample(names, trials)
        for node in order:
            time.sleep(rng.uniform(0, monitoring.SCRAPE_INTERVAL_S))
            t0 = time.monotonic()
            monitoring.inject(sim, node, "xid=79,gpu=2")
            while "drain" not in _node_state(sim.env, node):
                if time.monotonic() - t0 > 120:
                    raise SystemExit(f"bench: {node} not drained within 120 s (see {state_dir})")
                time.sleep(0.1)
            latencies.append(time.monotonic() - t0)
            monitoring.heal(sim, node)
            # resume only once the service has seen the node healthy, or it would drain it again
            healed = time.time()
            _wait(lambda h=healed: _status_after(state_dir, h, fail=0), 60, f"{node} judged healthy")
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=sim.env,
                           check=False, capture_output=True, timeout=30)  # the service may have resumed it
            _wait(lambda n=node: _node_state(sim.env, n) == "idle", 60, f"{node} idle again")
        pass_sum, pass_count = _pass_seconds(metrics_url)
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        sim.down()
        if keep or len(latencies) < trials:  # the service's log and decisions explain a failed run
            print(f"bench: kept {state_dir}", file=sys.stderr)
        else:
            shutil.rmtree(state_dir, ignore_errors=True)
    target = monitoring.SCRAPE_INTERVAL_S + 2.0
    median = statistics.median(latencies)
    return {
        "nodes": nodes,
        "trials": trials,
        "interval_s": interval,
        "scrape_interval_s": monitoring.SCRAPE_INTERVAL_S,
        "latencies_s": [round(x, 2) for x in latencies],
        "median_s": round(median, 2),
        "max_s": round(max(latencies), 2),
        "target_s": target,
        "ratio_median": round(median / target, 2),
        "ratio_max": round(max(latencies) / target, 2),
        "mean_pass_s": round(pass_sum / pass_count, 3) if pass_count else None,
        "sim_up_s": round(up_s, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--interval", type=float, default=1.0, help="the service's seconds between passes")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    ap.add_argument("--keep", action="store_true", help="keep the sim's directory (logs, decisions)")
    args = ap.parse_args()
    if shutil.which("slurmctld") is None or shutil.which("prometheus") is None:
        raise SystemExit("bench: needs Slurm and Prometheus (scripts/bootstrap.sh installs them)")
    r = run(args.nodes, args.trials, args.interval, args.seed, args.keep)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return
    print(f"fault-to-drain: {r['nodes']}-node sim, scrape every {r['scrape_interval_s']} s, service interval "
          f"{r['interval_s']} s, {r['trials']} trials (mean pass {r['mean_pass_s']} s)")
    print(f"  median {r['median_s']} s, max {r['max_s']} s (target <= {r['target_s']} s: ratio "
          f"{r['ratio_median']} median, {r['ratio_max']} max); all: "
          + ", ".join(f"{x}" for x in r["latencies_s"]))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
