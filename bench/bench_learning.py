"""How much the demo recipe learns, over job seeds and machine load.

    python bench/bench_learning.py [--job FILE] [--seeds 0-5] [--loads quiet,loaded] [--env-seed N]
        [--keep DIR] [--json]

Runs the whole demo job (`training/configs/demo.toml`, or `--job`, e.g. the tiny MoE's
`training/configs/moe-demo.toml`: SFT to the accuracy target, then asynchronous RL) once per job
seed and load condition, one run at a time, and reports the held-out gain (accuracy after RL minus
after SFT, pass@1 at the sampling temperature) of each run and its minimum, median and maximum per
condition and overall. `loaded` runs a CPU-bound process beside the job for the whole run (on a
2-core machine it takes one core), which changes the asynchronous schedule's timing: which policy
version generated each batch. `--env-seed` draws another train/held-out split (the environment's
`seed` kwarg); `-o KEY=VALUE` adds overrides; `--keep DIR` keeps each run's directory (an outlier's
metrics and logs).

The CI test (tests/integration/training/test_rl_learns.py) asserts a margin that this bench's
minimum must clear with room; docs/benchmarks.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "training" / "configs" / "demo.toml"
LOADS = ("quiet", "loaded")


@dataclass(frozen=True)
class LearningRun:
    seed: int
    load: str
    sft_steps: int
    before: float  # held-out accuracy after SFT
    after: float  # after RL
    rl_steps: int
    wall_s: float

    @property
    def gain(self) -> float:
        return self.after - self.before


def parse_seeds(text: str) -> list[int]:
    """'0-5' or '0,3,7' (or a mix: '0-2,9')."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {text!r}: need distinct seeds, e.g. 0-5")
    return seeds


def read_run(run_dir: Path, seed: int, load: str, wall_s: float) -> LearningRun:
    """The eval events of a finished run: the first (after SFT) and the last (after RL)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = sorted((r for r in records if r.get("event") == "eval"), key=lambda r: r["step"])
    if len(evals) < 2 or evals[0]["step"] != 0:
        raise ValueError(f"{run_dir}: expected an eval at step 0 and one at the end, got {len(evals)}")
    stable = run_dir / "sft" / "final" / "STABLE"
    sft_steps = int(json.loads(stable.read_text() or "{}").get("steps", 0)) if stable.exists() else 0
    return LearningRun(
        seed=seed,
        load=load,
        sft_steps=sft_steps,
        before=evals[0]["eval_accuracy"],
        after=evals[-1]["eval_accuracy"],
        rl_steps=evals[-1]["step"],
        wall_s=round(wall_s, 1),
    )


def summarise(runs: list[LearningRun]) -> dict[str, dict[str, float]]:
    """min / median / max gain per load condition and over all runs."""
    groups = {load: [r.gain for r in runs if r.load == load] for load in LOADS}
    groups["all"] = [r.gain for r in runs]
    return {
        name: {
            "runs": len(gains),
            "min": round(min(gains), 4),
            "median": round(statistics.median(gains), 4),
            "max": round(max(gains), 4),
        }
        for name, gains in groups.items()
        if gains
    }


def env_seed_override(env_seed: int, job: Path = DEMO) -> str:
    """`env.kwargs=...`: the job's environment arguments with another data seed."""
    kwargs = dict(tomllib.loads(job.read_text())["env"]["kwargs"], seed=env_seed)
    return "env.kwargs={" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in kwargs.items()) + "}"


def hog() -> subprocess.Popen[bytes]:
    """One CPU-bound process: a busy loop in its own interpreter."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def run_job(work: Path, seed: int, load: str, overrides: list[str], job: Path = DEMO) -> LearningRun:
    out = work / f"seed{seed}-{load}"
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--local", "--job", str(job)]
    argv += ["--output", str(out), "-o", f"seed={seed}"]
    for o in overrides:
        argv += ["-o", o]
    competitor = hog() if load == "loaded" else None
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed} ({load}) failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return read_run(out, seed, load, time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", type=Path, default=DEMO, help="the job file (default: the demo)")
    ap.add_argument("--seeds", default="0-5", help="job seeds: 0-5, or 0,3,7")
    ap.add_argument("--loads", default=",".join(LOADS), help="quiet, loaded or both (comma-separated)")
    ap.add_argument("--env-seed", type=int, default=None, help="the environment's data seed (default: demo)")
    ap.add_argument("-o", dest="overrides", action="append", default=[], help="extra config override")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    loads = [x.strip() for x in args.loads.split(",")]
    if not loads or any(x not in LOADS for x in loads):
        ap.error(f"--loads: choose from {', '.join(LOADS)}")
    overrides = list(args.overrides)
    if args.env_seed is not None:
        overrides.append(env_seed_override(args.env_seed, args.job))
    runs: list[LearningRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        work = args.keep or Path(tmp)
        for load in loads:
            for seed in seeds:
                run = run_job(work, seed, load, overrides, args.job)
                runs.append(run)
                if not args.json:
                    print(
                        f"seed {run.seed} {run.load:6}: SFT {run.sft_steps:4} steps, held-out "
                        f"{run.before:.3f} -> {run.after:.3f} ({run.gain:+.3f}) in {run.rl_steps} RL steps, "
                        f"{run.wall_s:.0f} s",
                        flush=True,
                    )
    summary = summarise(runs)
    if args.json:
        rows = [asdict(r) | {"gain": round(r.gain, 4)} for r in runs]
        print(json.dumps({"runs": rows, "summary": summary}, indent=2))
        return
    for name, s in summary.items():
        gains = f"min {s['min']:+.3f}, median {s['median']:+.3f}, max {s['max']:+.3f}"
        print(f"{name:6}: {s['runs']} runs, gain {gains}")


if __name__ == "__main__":
    main()
