"""Rollout scheduling on a long-tail environment: batch-at-a-time against continuous.

    python bench/bench_scheduling.py [--steps 30] [--repeats 1] [--json]

The long_tail environment's answers are mostly 1-3 characters and sometimes 16-32, so a batch
waits for a few long completions while the engine runs nearly empty. Three settings, interleaved:
async_level=0 (always the batch schedule), async_level=1 with the batch schedule (the old
orchestrator) and async_level=1 with continuous scheduling. All start from one SFT checkpoint
(taught the answer lengths), made once by the first run.

Reported per setting (median over repeats of steady-state values, the first --skip steps dropped):
- rollouts/s from the orchestrator's metrics;
- idle: the share of each step the server had no request outstanding (orchestrator metric);
- slot idle: 1 - the mean number of sequences in the engine (sampled from the server's /metrics
  every 50 ms) over the most the orchestrator asks for at once (batch_groups x group_size): the
  capacity a long tail leaves unused even while the server is never fully idle.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH_GROUPS, GROUP_SIZE = 16, 8

COMMON = [
    "env.name=long_tail",
    "env.kwargs={num_train = 2000, num_eval = 20}",
    "sft.steps=300",
    "sft.num_demos=1000",
    f"orchestrator.batch_groups={BATCH_GROUPS}",
    f"orchestrator.group_size={GROUP_SIZE}",
    "eval.size=0",
    "orchestrator.max_off_policy_steps=2",
    "inference.max_tokens=40",
    "inference.max_batch_size=256",
    "trainer.checkpoint_every=1000",
]
SETTINGS = {
    "async0": ["orchestrator.async_level=0"],
    "async1-batch": ["orchestrator.async_level=1", "orchestrator.scheduling=batch"],
    "async1-continuous": ["orchestrator.async_level=1", "orchestrator.scheduling=continuous"],
}


def sample_in_flight(run: Path, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Sequences in the inference engine over time, from its Prometheus endpoint."""
    peer = run / "peers" / "inference-0.json"
    while not peer.exists() and not stop.is_set():
        time.sleep(0.05)
    if stop.is_set():
        return
    url = json.loads(peer.read_text())["url"] + "/metrics"
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                for line in resp.read().decode().splitlines():
                    if line.startswith("opsctl_inference_in_flight "):
                        out.append((time.time(), float(line.split()[1])))
        except OSError:
            pass  # not up yet, or already stopped
        stop.wait(0.05)


def run_once(name: str, steps: int, skip: int, work: Path, sft: Path | None) -> dict[str, float]:
    out = work / name
    argv = [sys.executable, "-m", "opsctl", "launch", "rl-run", "--local", "--output", str(out)]
    argv += ["--job", str(ROOT / "training" / "configs" / "demo.toml")]
    model = ["sft.enabled=false", f"model.path={sft}"] if sft else []
    for o in [*COMMON, *model, *SETTINGS[name], f"trainer.steps={steps}"]:
        argv += ["-o", o]
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_in_flight, args=(out, stop, samples), daemon=True)
    sampler.start()
    try:
        subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    finally:
        stop.set()
        sampler.join(5)
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    orch = [r for r in recs if r["component"] == "orchestrator" and "event" not in r][skip:]
    span = orch[-1]["time"] - orch[0]["time"]
    cap = BATCH_GROUPS * GROUP_SIZE
    slot_idle = []
    for prev, cur in itertools.pairwise(orch):
        window = [n for t, n in samples if prev["time"] < t <= cur["time"]]
        if window:
            slot_idle.append(1 - statistics.fmean(min(n, cap) for n in window) / cap)
    return {
        "rollouts_per_s": sum(r["rollouts"] for r in orch[1:]) / span,
        "idle_frac": statistics.median(r["inference_idle_frac"] for r in orch),
        "slot_idle_frac": statistics.median(slot_idle) if slot_idle else float("nan"),
        "completion_tokens_per_rollout": statistics.fmean(
            r["completion_tokens"] / r["rollouts"] for r in orch
        ),
        "cancelled_groups": float(orch[-1]["cancelled_groups_total"]),
        "dropped_groups": float(orch[-1]["dropped_groups_total"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
        sft: Path | None = None
        names = list(SETTINGS)
        # Interleaved, the order reversed every other repeat, so drifting load hits all alike.
        for i in range(args.repeats):
            for name in names if i % 2 == 0 else names[::-1]:
                work = Path(tmp) / f"r{i}"
                work.mkdir(exist_ok=True)
                runs[name].append(run_once(name, args.steps, args.skip, work, sft))
                sft = sft or work / name / "sft" / "final"
    results: dict[str, Any] = {
        k: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for k, rs in runs.items()
    }
    base = results["async0"]["rollouts_per_s"]
    results["ratio_async1_batch"] = results["async1-batch"]["rollouts_per_s"] / base
    results["ratio_async1_continuous"] = results["async1-continuous"]["rollouts_per_s"] / base
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name in SETTINGS:
        r = results[name]
        print(
            f"{name}: {r['rollouts_per_s']:.1f} rollouts/s, idle {r['idle_frac']:.3f}, "
            f"slot idle {r['slot_idle_frac']:.3f} per step, {r['completion_tokens_per_rollout']:.1f} "
            f"tokens/rollout, cancelled {r['cancelled_groups']:.0f}, dropped {r['dropped_groups']:.0f}"
        )
    print(
        f"ratio vs async0: batch x{results['ratio_async1_batch']:.2f}, "
        f"continuous x{results['ratio_async1_continuous']:.2f}"
    )


if __name__ == "__main__":
    main()
