"""Launch and recovery latency of `opsctl launch rl-run` + `opsctl watch --remediate` on the
simulated cluster (real slurmctld/slurmd, 4 nodes, tiny CPU job).

    python bench/bench_launch.py [--repeat 3] [--json]

launch_to_first_step_s   `opsctl launch` invoked -> first trainer step in metrics.jsonl
failure_to_resumed_s     node killed (slurmd stopped, its processes killed) -> first trainer step
                         of the next attempt (detect + drain + requeue + Slurm's requeue hold +
                         restart + checkpoint load)

The sim shortens SlurmdTimeout to 10 s and cred_expire (Slurm's hold on a requeued job) to 15 s;
production defaults (300 s and 120 s) dominate recovery there. SFT is off so that the first step
measures the launch path, not the SFT stage.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "launch"))
sys.path.insert(0, str(ROOT / "tests"))  # tiny_job, which launch_sim_helpers imports

from launch_sim_helpers import LaunchEnv, LaunchSim, launch_toml  # noqa: E402
from simnode import kill_node  # noqa: E402


def trainer_times(metrics: Path) -> list[tuple[float, int]]:
    out = []
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("component") == "trainer":
                out.append((float(rec["time"]), int(rec["step"])))
    return out


def wait(pred: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("bench: timed out")
        time.sleep(0.1)


def one(env: LaunchEnv, name: str) -> dict[str, float]:
    run = env.root / "runs" / name
    t0 = time.time()
    out = env.launch(run, "-o", "sft.enabled=false", "-o", "trainer.steps=200", "-o",
                     "trainer.checkpoint_every=5")
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    metrics = run / "metrics.jsonl"
    watch = env.watch(run, "--remediate", log=env.root / f"{name}.watch.jsonl")
    try:
        wait(lambda: trainer_times(metrics), 300)
        first = trainer_times(metrics)[0][0] - t0
        wait(lambda: max(s for _, s in trainer_times(metrics)) >= 7, 300)
        victim = json.loads((run / "attempts" / "0.json").read_text())["nodes"][1]
        t_fail = time.time()
        kill_node(env.sim, victim)
        wait(lambda: (run / "attempts" / "1.json").exists(), 300)
        wait(lambda: any(t > t_fail and s < 7 + 5 and (run / "attempts" / "1.json").exists()
                         for t, s in trainer_times(metrics) if t > json.loads(
                             (run / "attempts" / "1.json").read_text())["start"]), 300)
        resumed = min(t for t, _ in trainer_times(metrics)
                      if t > json.loads((run / "attempts" / "1.json").read_text())["start"])
    finally:
        subprocess.run(["scancel", "--name", f"rl-{name}"], env=env.env, check=False)
        watch.kill()
        watch.wait()
    env.sim.start_slurmd(victim)
    env.sim.reset()
    (env.root / "quarantine.json").unlink(missing_ok=True)
    return {"launch_to_first_step_s": first, "failure_to_resumed_s": resumed - t_fail}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="blaunch") as tmp:
        root = Path(tmp)
        sim = LaunchSim(nodes=4, state_dir=root / "s", slurmd_timeout=10)
        try:
            sim.up()
            config = root / "opsctl.toml"
            config.write_text(sim.config_path.read_text() + launch_toml(root))
            env = LaunchEnv(sim, root, config)
            results = [one(env, f"b{i}") for i in range(args.repeat)]
        finally:
            sim.down()
    summary = {k: {"median": statistics.median(r[k] for r in results), "runs": [r[k] for r in results]}
               for k in results[0]}
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k}: median {v['median']:.1f} s over {len(v['runs'])} runs "
                  f"({', '.join(f'{x:.1f}' for x in v['runs'])})")


if __name__ == "__main__":
    main()
