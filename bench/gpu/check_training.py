"""GPU check of the trainer's CUDA paths that the CPU tests cannot reach.

    python bench/gpu/check_training.py [--json-out FILE]

1. Packed rows on CUDA: `packed_token_logprobs` (block-diagonal causal mask, per-document
   positions) against each document scored alone, in float32 (max |diff| under 1e-4) and bfloat16
   (mean |diff| under 0.05: bf16 rounds differently for different shapes, so only the mean is a
   fair test there). The mask must also matter: without it, later documents differ.
2. Fillers on CUDA: adding zero-loss filler micro-batches changes neither the loss nor any gradient
   (bitwise), as on the CPU.
3. Trainer step throughput on one GPU, packed vs one document per row, for a mid-size qwen3 model
   (hidden 1024, 8 layers) on a long-tail batch: tokens/s and padding fraction of each.

Needs CUDA; without it, prints one line and exits 2. Prints one JSON verdict and exits 0 when every
check passed, else 1. (The NCCL/FSDP2 checkpoint path is tests/integration/training/
test_checkpoint_cuda.py, run beside this by the device script in docs/benchmarks.md.)
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from training.config import ModelConfig  # noqa: E402
from training.model import create_tiny_model, load_model, packed_token_logprobs, token_logprobs  # noqa: E402
from training.orchestrator.batch import Sample, collate, filler, pack  # noqa: E402
from training.trainer.step import accumulate  # noqa: E402


def sample(rng: random.Random, n: int, vocab: int, prompt: int = 3) -> Sample:
    ids = [rng.randrange(4, vocab) for _ in range(n)]
    return Sample(
        input_ids=ids,
        loss_mask=[0] * prompt + [1] * (n - prompt),
        logprobs=[-rng.random() for _ in range(n)],
        advantages=[rng.uniform(-1, 1) for _ in range(n)],
    )


def packed_vs_alone(model: Any, dev: torch.device, vocab: int) -> dict[str, float]:
    rng = random.Random(0)
    docs = [sample(rng, n, vocab) for n in (9, 5, 13, 7, 11, 4)]
    (one,) = pack(docs, micro_batch_tokens=10_000, row_tokens=32)  # one micro-batch of several rows
    mb = collate(one, pad_id=0)
    t = {k: v.to(dev) for k, v in mb.items()}
    diffs, leaky = [], []
    with torch.no_grad():
        packed = packed_token_logprobs(model, t["input_ids"], t["position_ids"], t["doc_ids"])
        unmasked = token_logprobs(model, t["input_ids"], (t["doc_ids"] >= 0).long())
        for row in range(t["input_ids"].shape[0]):
            doc_ids = t["doc_ids"][row]
            for d in sorted(set(doc_ids.tolist()) - {-1}):
                cols = (doc_ids == d).nonzero().squeeze(-1)
                ids = t["input_ids"][row, cols][None]
                alone = token_logprobs(model, ids, torch.ones_like(ids))[0, 1:]
                diffs.append((packed[row, cols][1:] - alone).abs().float())
                if d > 0:
                    leaky.append((unmasked[row, cols][1:] - alone).abs().float())
    allv = torch.cat(diffs)
    return {
        "max_abs_diff": float(allv.max()),
        "mean_abs_diff": float(allv.mean()),
        "unmasked_mean_abs_diff": float(torch.cat(leaky).mean()),
    }


def fillers_exact(model: Any, dev: torch.device, vocab: int) -> bool:
    rng = random.Random(1)
    samples = [sample(rng, rng.randrange(6, 16), vocab) for _ in range(12)]
    loss_tokens = sum(sum(s.loss_mask) for s in samples)
    mbs = [collate(mb, 0) for mb in pack(samples, micro_batch_tokens=40)]
    runs = []
    for batch in (mbs, [filler(0), *mbs, filler(0)]):
        model.zero_grad(set_to_none=True)
        st = accumulate(model, batch, loss_tokens, world=1, fsdp=False, device=dev, temperature=1.0,
                        ratio_low=0.125, ratio_high=8.0)
        runs.append((st.loss, [p.grad.clone() for p in model.parameters()]))
    (la, ga), (lb, gb) = runs
    return bool(la == lb and all(torch.equal(a, b) for a, b in zip(ga, gb, strict=True)))


def throughput(dev: torch.device, tmp: Path) -> dict[str, Any]:
    mc = ModelConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16,
                     num_key_value_heads=4, head_dim=64)
    path = create_tiny_model(mc, tmp / "mid", seed=0)
    model = load_model(path, "bfloat16", dev)
    vocab = int(model.config.vocab_size)
    rng = random.Random(2)
    # Long tail: most completions short, a few near the cap (what RL rollouts look like).
    samples = [sample(rng, min(1024, 16 + int(rng.paretovariate(1.2) * 24)), vocab) for _ in range(256)]
    loss_tokens = sum(sum(s.loss_mask) for s in samples)
    real = sum(len(s.input_ids) for s in samples)
    out: dict[str, Any] = {"samples": len(samples), "real_tokens": real}
    for name, row_tokens in (("packed", 1024), ("one_per_row", 1)):
        mbs = [collate(mb, 0) for mb in pack(samples, micro_batch_tokens=16_384, row_tokens=row_tokens)]
        padded = sum(int(m["input_ids"].numel()) for m in mbs)
        times = []
        for _ in range(4):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            accumulate(model, mbs, loss_tokens, world=1, fsdp=False, device=dev, temperature=1.0,
                       ratio_low=0.125, ratio_high=8.0)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times[1:])  # the first run pays for kernel selection
        out[name] = {
            "micro_batches": len(mbs),
            "padding_fraction": round(1 - real / padded, 4),
            "step_s_median": round(med, 4),
            "real_tokens_per_s": round(real / med),
        }
    out["packed_speedup"] = round(out["one_per_row"]["step_s_median"] / out["packed"]["step_s_median"], 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("check_training: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda:0")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tiny = create_tiny_model(ModelConfig(), tmp / "tiny", seed=0)
        result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
        m32 = load_model(tiny, "float32", dev)
        vocab = int(m32.config.vocab_size)
        result["packed_fp32"] = packed_vs_alone(m32, dev, vocab)
        result["packed_bf16"] = packed_vs_alone(load_model(tiny, "bfloat16", dev), dev, vocab)
        result["fillers_bitwise"] = fillers_exact(m32, dev, vocab)
        result["throughput"] = throughput(dev, tmp)
    ok = (
        result["packed_fp32"]["max_abs_diff"] < 1e-4
        and result["packed_bf16"]["mean_abs_diff"] < 0.05
        and result["packed_fp32"]["unmasked_mean_abs_diff"] > 1e-3
        and result["fillers_bitwise"]
    )
    result["ok"] = ok
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
