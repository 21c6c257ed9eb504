"""Peak tensor memory of the trainer's log-probabilities, full logits against chunks
(training/model.py, trainer.logprob_chunk_tokens), forward and backward, from torch's profiler
memory accounting (training/profiling.py).

    python bench/bench_logprob_memory.py [--chunk 512] [--json]

Sizes: token positions x vocabulary, hidden size 64 (the head's input; its size barely matters
here): 32k is a Qwen-class vocabulary, 151,552 GLM-4.5's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from training.model import _selected_logprobs, chunked_logprobs
from training.profiling import peak_tensor_bytes

SIZES = [(2048, 32_000), (4096, 32_000), (2048, 151_552)]
HIDDEN = 64


def measure(positions: int, vocab: int, chunk: int) -> dict[str, float]:
    torch.manual_seed(0)
    head = torch.nn.Linear(HIDDEN, vocab, bias=False)
    hidden = torch.randn(1, positions, HIDDEN, requires_grad=True)
    targets = torch.randint(0, vocab, (1, positions))

    def full() -> None:
        _selected_logprobs(head(hidden), targets, 1.0).sum().backward()

    def chunked() -> None:
        chunked_logprobs(hidden, head, targets, 1.0, chunk).sum().backward()

    mib = 2**20
    f, c = peak_tensor_bytes(full) / mib, peak_tensor_bytes(chunked) / mib
    return {"positions": positions, "vocab": vocab, "chunk": chunk, "logits_mib": positions * vocab * 4 / mib,
            "full_peak_mib": round(f, 1), "chunked_peak_mib": round(c, 1), "ratio": round(c / f, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [measure(p, v, args.chunk) for p, v in SIZES]
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['positions']} x {r['vocab']}: logits {r['logits_mib']:.0f} MiB; peak full "
                  f"{r['full_peak_mib']} MiB, chunks of {r['chunk']} {r['chunked_peak_mib']} MiB "
                  f"({r['ratio']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
