"""Built-in inference engine throughput with and without its KV cache.

    python bench/bench_engine.py [--repeats 5] [--batch 32] [--shapes 16x16,64x64,128x128] [--json]

Each shape PxG submits `--batch` prompts of P tokens at once (temperature 1, fixed seed) and
generates G tokens for each (no stop tokens), on the demo's tiny qwen3 model with one torch thread.
Reports generated tokens per second of wall time, the median of --repeats runs, for kv_cache=True
and kv_cache=False, and their ratio. Both runs produce the same tokens (checked).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.config import ModelConfig
from training.inference.engine import Engine
from training.model import create_tiny_model, load_model
from training.tokenizer import load_tokenizer


def run_once(model_dir: Path, kv_cache: bool, prompts: list[list[int]], gen: int) -> tuple[float, list[Any]]:
    tok = load_tokenizer(model_dir)
    eng = Engine(load_model(model_dir), tok.pad_token_id, set(), len(prompts), kv_cache=kv_cache)
    try:
        eng.pause()
        req = eng.submit(prompts, n=1, max_tokens=gen, temperature=1.0, seed=0)
        t0 = time.perf_counter()
        eng.resume()
        seqs = req.wait(3600)
        elapsed = time.perf_counter() - t0
    finally:
        eng.stop()
    return sum(len(s.tokens) for s in seqs) / elapsed, [s.tokens for s in seqs]


def bench_shape(model_dir: Path, prompt_len: int, gen: int, batch: int, repeats: int) -> dict[str, Any]:
    rng = random.Random(prompt_len * 1000 + gen)
    vocab = len(load_tokenizer(model_dir))
    prompts = [[1] + [rng.randrange(4, vocab) for _ in range(prompt_len - 1)] for _ in range(batch)]
    rates: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, list[Any]] = {}
    for _ in range(repeats):
        for kv in (True, False):  # interleaved, so drifting machine load hits both alike
            rate, outputs[kv] = run_once(model_dir, kv, prompts, gen)
            rates[kv].append(rate)
    if outputs[True] != outputs[False]:
        raise SystemExit("bench_engine: the cached and uncached engines generated different tokens")
    cached, full = statistics.median(rates[True]), statistics.median(rates[False])
    return {
        "prompt_tokens": prompt_len,
        "generated_tokens": gen,
        "batch": batch,
        "repeats": repeats,
        "kv_cache_tokens_per_s": round(cached, 1),
        "no_cache_tokens_per_s": round(full, 1),
        "ratio": round(cached / full, 2),
    }


def parse_shapes(raw: str) -> list[tuple[int, int]]:
    try:
        shapes = [tuple(int(x) for x in part.split("x")) for part in raw.split(",")]
        if not all(len(s) == 2 and s[0] >= 1 and s[1] >= 1 for s in shapes):
            raise ValueError
    except ValueError:
        raise SystemExit(f"bench_engine: --shapes: expected PROMPTxGEN[,...], got {raw!r}") from None
    return [(s[0], s[1]) for s in shapes]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shapes", default="16x16,64x64,128x128")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)
    if any(p + g > 256 for p, g in shapes):  # the tiny model's max_position_embeddings
        raise SystemExit("bench_engine: --shapes: prompt + generated tokens must be <= 256")
    if args.repeats < 1 or args.batch < 1:
        raise SystemExit("bench_engine: --repeats and --batch must be >= 1")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = create_tiny_model(ModelConfig(), Path(tmp) / "model", seed=0)
        results = [bench_shape(model_dir, p, g, args.batch, args.repeats) for p, g in shapes]
    if args.json:
        print(json.dumps({"bench": "engine", "results": results}, indent=2))
        return
    print(f"{'prompt':>7} {'gen':>5} {'batch':>6} {'kv tok/s':>10} {'no-kv tok/s':>12} {'ratio':>6}")
    for r in results:
        print(
            f"{r['prompt_tokens']:>7} {r['generated_tokens']:>5} {r['batch']:>6} "
            f"{r['kv_cache_tokens_per_s']:>10} {r['no_cache_tokens_per_s']:>12} {r['ratio']:>6}"
        )


if __name__ == "__main__":
    main()
