"""Throughput of asynchronous RL: async_level=1 against async_level=0 on a balanced config.

With async_level=0 inference waits for every trainer step and the trainer waits for every batch;
with async_level=1 inference generates batch s with policy s-1 while the trainer trains step s-1.
On a config where generation and a trainer step take about as long, the ideal ratio is 2x.

    python bench/bench_async.py [--steps 40] [--json]

Reports rollouts/s (orchestrator) and trainer tokens/s over the steady-state steps (the first
few steps are skipped), each the median of --repeats runs. --scheduling sets the async_level=1
runs' orchestrator.scheduling (default "auto", which is the batch schedule on the built-in engine;
async_level=0 always uses it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Balanced on a 2-core machine: one inference thread and one trainer thread, a generation step
# and a trainer step of similar length.
BALANCED = [
    "sft.enabled=false",
    "model.hidden_size=128",
    "model.intermediate_size=256",
    "model.head_dim=32",
    "model.num_hidden_layers=2",
    "orchestrator.batch_groups=16",
    "orchestrator.group_size=8",
    "eval.size=0",
    "orchestrator.max_off_policy_steps=4",
    "inference.max_tokens=8",
    "inference.max_batch_size=256",
    "trainer.checkpoint_every=1000",
]


def run_once(
    async_level: int, steps: int, skip: int, work: Path, scheduling: str = "auto"
) -> dict[str, float]:
    out = work / f"k{async_level}"
    argv = [
        sys.executable,
        "-m",
        "opsctl",
        "launch",
        "rl-run",
        "--local",
        "--output",
        str(out),
        "--job",
        str(ROOT / "training" / "configs" / "demo.toml"),
    ]
    for o in [*BALANCED, f"trainer.steps={steps}", f"orchestrator.async_level={async_level}",
              f"orchestrator.scheduling={scheduling}"]:
        argv += ["-o", o]
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    orch = [r for r in recs if r["component"] == "orchestrator" and "event" not in r][skip:]
    trainer = [r for r in recs if r["component"] == "trainer"][skip:]
    span_o = orch[-1]["time"] - orch[0]["time"]
    span_t = trainer[-1]["time"] - trainer[0]["time"]
    return {
        "rollouts_per_s": sum(r["rollouts"] for r in orch[1:]) / span_o,
        "trainer_tokens_per_s": sum(r["rank_tokens"] for r in trainer[1:]) / span_t,
        "trainer_step_s": statistics.median(r["step_time"] - r["wait_time"] for r in trainer),
        "trainer_wait_s": statistics.median(r["wait_time"] for r in trainer),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--scheduling", choices=("auto", "batch", "continuous"), default="auto",
                    help="orchestrator.scheduling of the async_level=1 runs (auto: batch on this engine)")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    runs: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        # Interleave the two settings so drifting load from other work on the machine hits both alike.
        for i in range(args.repeats):
            for k in (0, 1) if i % 2 == 0 else (1, 0):
                work = Path(tmp) / f"k{k}-r{i}"
                work.mkdir()
                runs[k].append(run_once(k, args.steps, args.skip, work, args.scheduling))
    for k, rs in runs.items():
        results[f"async_level={k}"] = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
    a0, a1 = results["async_level=0"], results["async_level=1"]
    results["scheduling"] = args.scheduling
    results["ratio_rollouts_per_s"] = a1["rollouts_per_s"] / a0["rollouts_per_s"]
    results["ratio_trainer_tokens_per_s"] = a1["trainer_tokens_per_s"] / a0["trainer_tokens_per_s"]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name in ("async_level=0", "async_level=1"):
        r = results[name]
        print(
            f"{name}: {r['rollouts_per_s']:.1f} rollouts/s, {r['trainer_tokens_per_s']:.0f} trainer tokens/s "
            f"(trainer step {r['trainer_step_s']:.3f}s, waiting {r['trainer_wait_s']:.3f}s)"
        )
    print(
        f"ratio: rollouts/s x{results['ratio_rollouts_per_s']:.2f}, "
        f"trainer tokens/s x{results['ratio_trainer_tokens_per_s']:.2f}"
    )


if __name__ == "__main__":
    main()
