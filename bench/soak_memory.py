"""Memory of `opsctl watch --remediate` and `opsctl remediator run` over a long stretch (issue 15).

    .venv/bin/python bench/soak_memory.py [--minutes 30] [--sample-s 30] [--nodes 8] [--json]

A simulated cluster with its monitoring (real slurmctld and slurmd, emulated dcgm-exporter/node
exporters scraped every 5 s by a real Prometheus). A tiny rl-run is launched on it with the
Prometheus health gate; once its trainer has logged a few steps the job is suspended (training for
30 minutes would take both cores of the machine this runs on; --train keeps it running), and
`opsctl watch --remediate` watches it while `opsctl remediator run` judges every node of the sim.
Both poll Slurm and Prometheus all along: the watch every --watch-interval, the service every
--service-interval. RSS and CPU seconds of both processes are sampled every --sample-s.

Pass ("no growth"): after --warmup-min, the least-squares slope of each process's RSS, with its
largest single rise between two samples taken out, is below --max-slope KiB/min (default 32
KiB/min, under 2 MiB an hour), and that rise is at most --max-step KiB (default 4 MiB). One rise
is forgiven because the allocator grows RSS in one-off steps (a new arena, about 0.5 MiB, once per
process): in a 15-minute fit window such a step alone reads as 35 KiB/min, while a leak rises
sample after sample, and taking one rise out of it barely changes its slope. Reports start/end/max
RSS, both slopes, the step and CPU seconds per minute per process; exits 1 if a process grew or
exited.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "launch"))
sys.path.insert(0, str(ROOT / "tests"))  # tiny_job, which launch_sim_helpers imports

from launch_sim_helpers import DEMO, TINY, LaunchSim, launch_toml  # noqa: E402
from procstat import cpu_seconds, linear_fit, rss_kib  # noqa: E402
from simrig import Service, wait  # noqa: E402


@dataclass
class Track:
    """The samples of one process: (seconds since start, RSS KiB, CPU seconds)."""

    name: str
    pid: int
    samples: list[tuple[float, int, float]] = field(default_factory=list)

    def sample(self, t: float) -> bool:
        rss, cpu = rss_kib(self.pid), cpu_seconds(self.pid)
        if rss is None or cpu is None or rss == 0:
            return False
        self.samples.append((round(t, 1), rss, round(cpu, 2)))
        return True


@dataclass
class Verdict:
    name: str
    start_kib: int
    end_kib: int
    max_kib: int
    slope_kib_per_min: float  # all samples after the warm-up
    step_kib: int  # the largest rise between two consecutive samples after the warm-up
    slope_without_step_kib_per_min: float  # the same samples with that rise taken out
    cpu_s_per_min: float
    ok: bool


def judge(track: Track, warmup_s: float, max_slope: float, max_step: float = 4096.0) -> Verdict:
    """Start/end/max RSS over all samples; slopes over those after the warm-up (all of them when too
    few came after it); CPU per minute over the whole soak."""
    s = track.samples
    after = [x for x in s if x[0] >= warmup_s]
    if len(after) < 3:
        after = s
    minutes_x = [x[0] / 60 for x in after]
    rss = [x[1] for x in after]
    rises = [b - a for a, b in itertools.pairwise(rss)]
    at = max(range(len(rises)), key=rises.__getitem__)  # the rise from sample `at` to `at + 1`
    step = max(rises[at], 0)
    flattened = [float(r - (step if i > at else 0)) for i, r in enumerate(rss)]
    slope = round(linear_fit(minutes_x, [float(r) for r in rss]).slope, 1)
    without = round(linear_fit(minutes_x, flattened).slope, 1)
    minutes = (s[-1][0] - s[0][0]) / 60
    cpu_rate = (s[-1][2] - s[0][2]) / minutes if minutes > 0 else 0.0
    return Verdict(track.name, s[0][1], s[-1][1], max(x[1] for x in s), slope, step, without,
                   round(cpu_rate, 2), without < max_slope and step <= max_step)


def _trainer_step(run: Path) -> int:
    from opsctl.watch import trainer_steps

    return max(trainer_steps(run / "metrics.jsonl"), default=-1)


def soak(args: argparse.Namespace) -> dict[str, object]:
    from opsctl.launch.ledger import load_ledger

    if shutil.which("slurmctld") is None or shutil.which("prometheus") is None:
        raise SystemExit("bench: needs Slurm and Prometheus (scripts/bootstrap.sh installs them)")
    root = Path(tempfile.mkdtemp(prefix="soak", dir="/tmp"))  # short: munge's socket lives inside
    sim = LaunchSim(nodes=args.nodes, state_dir=root / "s", addons=["monitoring"], slurmd_timeout=10)
    procs: list[subprocess.Popen[bytes]] = []
    svc = Service(sim, root / "svc", args.nodes)
    ok = False
    job: int | None = None
    try:
        sim.up()
        # the watch's config: the sim's plus [launch] with the Prometheus health gate (written before
        # the service's settings, so the two keep separate health state files)
        config = root / "opsctl.toml"
        section = launch_toml(root).replace('health_source = "none"', 'health_source = "prometheus"')
        config.write_text(sim.config_path.read_text() + section)
        env = {**sim.env, "OPSCTL_CONFIG": str(config)}
        run = root / "runs" / "soak"
        argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--job", str(DEMO),
                "--output", str(run), "-o", "trainer.steps=1000000", "-o", "trainer.checkpoint_every=5"]
        for o in TINY:
            argv += ["-o", o]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
                             check=False)
        if out.returncode != 0:
            raise SystemExit(f"bench: launch failed: {out.stderr.strip()[-500:]}")
        wait(lambda: _trainer_step(run) >= 3, 600, "trainer step 3", interval=1.0)
        job = load_ledger(run).job_ids[-1]
        if not args.train:
            subprocess.run(["scontrol", "suspend", str(job)], env=sim.env, check=True, capture_output=True)
        log = (root / "watch.jsonl").open("wb")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "opsctl", "watch", "--remediate", "--json", "--interval",
             str(args.watch_interval), str(run)], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
        svc.configure(args.service_interval)
        svc.start()
        assert svc.proc is not None
        tracks = [Track("opsctl watch --remediate", procs[0].pid),
                  Track("opsctl remediator run", svc.proc.pid)]
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        while True:
            now = time.monotonic()
            for tr in tracks:
                if not tr.sample(now - t0):
                    raise SystemExit(f"bench: {tr.name} exited (see {root})")
            if now >= end:
                break
            time.sleep(min(args.sample_s, max(0.0, end - now)))
        verdicts = [judge(tr, args.warmup_min * 60, args.max_slope, args.max_step) for tr in tracks]
        ok = all(v.ok for v in verdicts)
        passes = (svc.status() or {}).get("number")
        return {"minutes": args.minutes, "nodes": args.nodes, "sample_s": args.sample_s,
                "warmup_min": args.warmup_min, "max_slope_kib_per_min": args.max_slope,
                "max_step_kib": args.max_step,
                "watch_interval_s": args.watch_interval, "service_interval_s": args.service_interval,
                "training": "running" if args.train else "suspended after step 3", "service_passes": passes,
                "ok": ok, "processes": [asdict(v) for v in verdicts],
                "samples": {tr.name: tr.samples for tr in tracks}}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        svc.stop()
        if job is not None:
            subprocess.run(["scancel", str(job)], env=sim.env, check=False, capture_output=True)
        sim.down()
        if ok or not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"bench: kept {root}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--sample-s", type=float, default=30.0)
    ap.add_argument("--warmup-min", type=float, default=5.0, help="minutes left out of the slope")
    ap.add_argument("--max-slope", type=float, default=32.0, help="KiB/min of RSS growth allowed")
    ap.add_argument("--max-step", type=float, default=4096.0, help="KiB of the one rise forgiven")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--watch-interval", type=float, default=2.0)
    ap.add_argument("--service-interval", type=float, default=2.0)
    ap.add_argument("--train", action="store_true", help="keep the job training instead of suspending it")
    ap.add_argument("--keep", action="store_true", help="keep the sim's directory after a failure")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.minutes <= 0 or args.sample_s <= 0:
        ap.error("--minutes and --sample-s must be positive")
    r = soak(args)
    if args.json:
        print(json.dumps(r, sort_keys=True))
    else:
        print(f"soak: {r['minutes']} min, {r['nodes']}-node sim, samples every {r['sample_s']} s, "
              f"slope after {r['warmup_min']} min without its largest rise, pass < "
              f"{r['max_slope_kib_per_min']} KiB/min and that rise <= {r['max_step_kib']} KiB")
        for v in r["processes"]:  # type: ignore[attr-defined]
            print(f"  {'PASS' if v['ok'] else 'FAIL'} {v['name']}: "
                  f"RSS start {v['start_kib'] / 1024:.1f} MiB, "
                  f"end {v['end_kib'] / 1024:.1f}, max {v['max_kib'] / 1024:.1f}; slope "
                  f"{v['slope_without_step_kib_per_min']} KiB/min without the largest rise "
                  f"({v['step_kib']} KiB), {v['slope_kib_per_min']} with it; CPU {v['cpu_s_per_min']} s/min")
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
