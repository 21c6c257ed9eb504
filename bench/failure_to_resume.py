"""Failure-to-resumed-step of a training run under `opsctl watch --remediate` (issue 15).

    .venv/bin/python bench/failure_to_resume.py [--runs 3] [--json]

A 4-node simulated cluster with its monitoring (real slurmctld and slurmd, emulated dcgm-exporter
and node exporters scraped every 5 s by a real Prometheus; Slurm's hold on a requeued job shortened
to 15 s as in the launch tests, though the watch resubmits a new job, which that hold does not
delay). Each run launches a tiny rl-run (2 nodes: inference and one trainer
rank, checkpoint every 5 steps) with the Prometheus health gate and watches it with
`opsctl watch --remediate --interval 1`. Once the trainer has logged step 7, the job is suspended
(an XID 79 hangs a job's collectives rather than ending it) and XID 79 is injected into the
trainer node's simulated GPU. The figure: seconds from the injection to the first trainer step
logged by the resumed attempt (scrape, watch poll, drain and quarantine, resubmission without the
node, Slurm's start of the new job, start-up, checkpoint load, one step). The node is then healed
and resumed by hand before the next run.

--no-spare launches on all 4 nodes (inference and 3 trainer ranks), so no node is left to replace
the failed one: the watch resubmits on the 3 left and the resumed attempt runs 2 trainer ranks from
the 3-rank checkpoint (docs/launch.md, shrink_on_failure).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "launch"))
sys.path.insert(0, str(ROOT / "tests"))  # tiny_job, which launch_sim_helpers imports

from launch_sim_helpers import CRED_EXPIRE_S, DEMO, TINY, LaunchSim, launch_toml  # noqa: E402
from simrig import resume, wait  # noqa: E402

FAULT_STEP = 7


@dataclass
class Trial:
    victim: str
    inject_to_detect_s: float  # the watch's first remediation record (drained, or refused and why)
    inject_to_requeue_s: float
    inject_to_resumed_step_s: float
    resume_step: int
    remediations: list[str]  # "action: why" as the ledger has them
    trainer_ranks: tuple[int, int]  # the failed attempt's and the resumed attempt's


def trainer_times(metrics: Path) -> list[tuple[float, int]]:
    """(time, step) of every trainer record in metrics.jsonl; a torn last line is skipped."""
    out: list[tuple[float, int]] = []
    try:
        lines = metrics.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("component") == "trainer" and "step" in rec and "time" in rec:
            out.append((float(rec["time"]), int(rec["step"])))
    return out


def first_after(times: list[tuple[float, int]], since: float) -> tuple[float, int] | None:
    """The first trainer record logged at or after ``since`` (the resumed attempt's start)."""
    later = sorted(t for t in times if t[0] >= since)
    return later[0] if later else None


def _attempt(run: Path, n: int) -> dict[str, object] | None:
    try:
        doc: dict[str, object] = json.loads((run / "attempts" / f"{n}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc


def one(sim: LaunchSim, config: Path, root: Path, name: str, no_spare: bool = False) -> Trial:
    from opsctl.launch.ledger import load_ledger
    from opsctl.sim import monitoring

    env = {**sim.env, "OPSCTL_CONFIG": str(config)}
    run = root / "runs" / name
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--job", str(DEMO), "--output", str(run),
            "-o", "sft.enabled=false", "-o", "trainer.steps=400", "-o", "trainer.checkpoint_every=5"]
    for o in TINY:
        argv += ["-o", o]
    if no_spare:
        argv += ["--nodes", "4"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    if out.returncode != 0:
        raise SystemExit(f"bench: launch failed: {out.stderr.strip()[-500:]}")
    metrics = run / "metrics.jsonl"
    with (root / f"{name}.watch.log").open("wb") as log:
        watch = subprocess.Popen(
            [sys.executable, "-m", "opsctl", "watch", "--remediate", "--json", "--interval", "1", str(run)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        wait(lambda: any(s >= FAULT_STEP for _, s in trainer_times(metrics)), 600,
             f"trainer step {FAULT_STEP}", interval=0.3)
        first = _attempt(run, 0)
        assert first is not None
        victim = str(first["nodes"][2 if no_spare else 1])  # type: ignore[index]  # a trainer node
        job = load_ledger(run).job_ids[-1]
        subprocess.run(["scontrol", "suspend", str(job)], env=sim.env, check=True, capture_output=True)
        t_inject = time.time()
        monitoring.inject(sim, victim, "xid=79,gpu=3")
        detected = requeued = 0.0
        while True:
            now = time.time()
            if not detected and load_ledger(run).remediations:
                detected = now
            second = _attempt(run, 1)
            if second is not None:
                requeued = requeued or now
                hit = first_after(trainer_times(metrics), float(second["start"]))  # type: ignore[arg-type]
                if hit is not None:
                    t_step, step = hit
                    break
            if watch.poll() is not None:
                log_path = root / f"{name}.watch.log"
                raise SystemExit(f"bench: the watch exited {watch.returncode} (see {log_path})")
            if now - t_inject > 600:
                raise SystemExit("bench: no resumed step within 600 s")
            time.sleep(0.2)
        led = load_ledger(run)
        if victim in led.attempts[1].nodes:
            raise SystemExit(f"bench: the resumed attempt runs on {victim} again")
        ranks = (int(first.get("trainer_world_size") or 0), int(second.get("trainer_world_size") or 0))
        if no_spare and ranks != (3, 2):
            raise SystemExit(f"bench: --no-spare expected 3 then 2 trainer ranks, got {ranks}")
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                watch.kill()
    for job_id in load_ledger(run).job_ids:
        subprocess.run(["scancel", str(job_id)], env=sim.env, check=False, capture_output=True)
    monitoring.heal(sim, victim)
    resume(sim.env, [victim])
    (root / "quarantine.json").unlink(missing_ok=True)
    sim.reset()
    return Trial(victim, round((detected or requeued) - t_inject, 2), round(requeued - t_inject, 2),
                 round(t_step - t_inject, 2), step,
                 [f"{r.action}: {r.why}" for r in led.remediations], ranks)


def _healthy(sim: LaunchSim) -> bool:
    argv = [sys.executable, "-m", "opsctl", "--config", str(sim.config_path), "health", "--json"]
    return subprocess.run(argv, capture_output=True, env=sim.env, timeout=120, check=False).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the sim's directory (logs, ledgers)")
    ap.add_argument("--no-spare", action="store_true",
                    help="launch on every node, so the run resumes on fewer trainer ranks")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if shutil.which("slurmctld") is None or shutil.which("prometheus") is None:
        raise SystemExit("bench: needs Slurm and Prometheus (scripts/bootstrap.sh installs them)")
    root = Path(tempfile.mkdtemp(prefix="f2r", dir="/tmp"))  # short: munge's socket lives inside
    sim = LaunchSim(nodes=4, state_dir=root / "s", addons=["monitoring"], slurmd_timeout=10)
    trials: list[Trial] = []
    try:
        sim.up()
        config = root / "opsctl.toml"
        section = launch_toml(root).replace('health_source = "none"', 'health_source = "prometheus"')
        config.write_text(sim.config_path.read_text() + section)
        for i in range(args.runs):
            # each run its own health state: a drain of the last run's node would count as a repeat
            sim.set_config("health", state_file=str(root / f"f{i}.state.json"),
                           decision_log=str(root / f"f{i}.decisions.jsonl"))
            config.write_text(sim.config_path.read_text() + section)
            # the healed node must look healthy to Prometheus before the next launch's gate
            wait(lambda: _healthy(sim), 120, "`opsctl health` exit 0", interval=1.0)
            trials.append(one(sim, config, root, f"f{i}", args.no_spare))
    finally:
        sim.down()
        if args.keep or len(trials) < args.runs:
            print(f"bench: kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    med = statistics.median(t.inject_to_resumed_step_s for t in trials)
    result = {"runs": [asdict(t) for t in trials], "median_s": med,
              "median_detect_s": statistics.median(t.inject_to_detect_s for t in trials),
              "cred_expire_s": CRED_EXPIRE_S, "scrape_interval_s": 5, "watch_interval_s": 1,
              "no_spare": args.no_spare}
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return
    layout = "all 4 nodes, resumed on 2 of 3 trainer ranks" if args.no_spare else "2 of 4 nodes"
    print(f"failure-to-resumed-step: 4-node sim ({layout}), {len(trials)} runs, XID 79 on a trainer "
          f"node at step {FAULT_STEP}")
    print(f"  median {med:.1f} s (all: {', '.join(f'{t.inject_to_resumed_step_s:.1f}' for t in trials)}); "
          f"detection median {result['median_detect_s']:.1f} s")


if __name__ == "__main__":
    main()
