"""Built-in inference engine decode throughput with and without the KV cache.

Without the cache every decode step recomputes each sequence's whole prefix; with it a step is
one forward over one token per sequence. The gap grows with the completion length.

    python bench/bench_engine.py [--batch 32] [--prompt 16] [--tokens 64] [--repeats 5] [--json]

A random tiny model (the demo's shape unless --hidden/--layers say otherwise) generates --tokens
tokens for each of --batch sequences; reports generated tokens/s, median over --repeats runs of
each setting, interleaved so drifting load from other work hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.config import ModelConfig
from training.inference.engine import Engine
from training.model import create_tiny_model, load_model, load_tokenizer


def tokens_per_s(engine: Engine, batch: int, prompt: int, tokens: int, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    prompts = [[1, *torch.randint(4, 40, (prompt - 1,), generator=gen).tolist()] for _ in range(batch)]
    t0 = time.perf_counter()
    seqs = engine.submit(prompts, n=1, max_tokens=tokens, temperature=1.0, seed=seed).wait(3600)
    return sum(len(s.tokens) for s in seqs) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(
        hidden_size=args.hidden, intermediate_size=2 * args.hidden, num_hidden_layers=args.layers
    )
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        path = create_tiny_model(cfg, Path(tmp) / "model", seed=0)
        pad = load_tokenizer(path).pad_token_id
        engines = {
            "kv_cache": Engine(load_model(path), pad, set(), args.batch),
            "recompute": Engine(load_model(path), pad, set(), args.batch, kv_cache=False),
        }
        runs: dict[str, list[float]] = {name: [] for name in engines}
        try:
            for eng in engines.values():  # warm-up
                tokens_per_s(eng, args.batch, args.prompt, 4, seed=0)
            for i in range(args.repeats):
                for name in engines if i % 2 == 0 else reversed(engines):
                    runs[name].append(tokens_per_s(engines[name], args.batch, args.prompt, args.tokens, i))
        finally:
            for eng in engines.values():
                eng.stop()
    result = {name: statistics.median(r) for name, r in runs.items()}
    out = {
        "tokens_per_s": result,
        "runs": runs,
        "ratio": result["kv_cache"] / result["recompute"],
        "config": vars(args),
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"engine decode, {args.batch} sequences x {args.tokens} tokens after a {args.prompt}-token prompt: "
        f"KV cache {result['kv_cache']:.0f} tokens/s, recompute {result['recompute']:.0f} tokens/s, "
        f"x{out['ratio']:.2f}"
    )


if __name__ == "__main__":
    main()
