"""Weight publication time: rank 0 streaming every tensor against every rank writing the shard of
the tensors it owns (training/weights.py), for three model sizes, on gloo ranks over loopback.

    python bench/bench_publish.py [--world 2] [--runs 3] [--json]

Each size is a dense decoder's tensors (embeddings, per layer q/k/v/o and a gated MLP, head) in
float32, sharded on dim 0 across the ranks as FSDP2 shards them (DTensor, Shard(0)). `stream`:
`writers=1`, rank 0 gathers and writes all (what the trainer did before); `sharded`: every rank
writes one shard file, gathering only its own tensors. Both end with the index, a rename and the
marker. On a 2-core machine the ranks share cores and one disk; on GPU nodes each rank has its own
link to the shared file system, where the sharded form's advantage grows with the rank count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# (name, hidden, layers, intermediate, vocab): about 50M, 200M and 600M parameters.
SIZES = [("50M", 512, 8, 2048, 32_000), ("200M", 1024, 12, 4096, 32_000), ("600M", 1536, 18, 6144, 64_000)]


def tensors(hidden: int, layers: int, inter: int, vocab: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[f"{p}self_attn.{proj}.weight"] = (hidden, hidden)
        shapes[f"{p}mlp.gate_proj.weight"] = (inter, hidden)
        shapes[f"{p}mlp.up_proj.weight"] = (inter, hidden)
        shapes[f"{p}mlp.down_proj.weight"] = (hidden, inter)
        shapes[f"{p}input_layernorm.weight"] = (hidden,)
        shapes[f"{p}post_attention_layernorm.weight"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def worker(rank: int, world: int, port: int, work: str, runs: int, out: str) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    from training.trainer.checkpoint import _collective_publish
    from training.weights import publish_sharded

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model_dir = Path(work) / "model"
    results: list[dict[str, Any]] = []
    for name, hidden, layers, inter, vocab in SIZES:
        gen = torch.Generator().manual_seed(0)
        sd = {k: distribute_tensor(torch.randn(shape, generator=gen), mesh, [Shard(0)])
              for k, shape in tensors(hidden, layers, inter, vocab).items()}
        params = sum(t.numel() for t in sd.values())
        for mode, writers in (("stream", 1), ("sharded", world)):
            times = []
            for r in range(runs):
                final = Path(work) / f"{name}-{mode}-{r}"
                dist.barrier()
                t0 = time.perf_counter()
                publish_sharded(final, sd, model_dir, {"version": r}, _collective_publish, writers=writers)
                times.append(time.perf_counter() - t0)
                if rank == 0:
                    shutil.rmtree(final)
            results.append({"size": name, "params": params, "bytes": params * 4, "mode": mode,
                            "median_s": round(statistics.median(times), 3),
                            "runs_s": [round(t, 3) for t in times]})
        del sd
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-publish-") as work:
        (Path(work) / "model").mkdir()
        (Path(work) / "model" / "config.json").write_text('{"model_type": "llama"}')
        out = Path(work) / "results.json"
        mp.start_processes(worker, args=(args.world, free_port(), work, args.runs, str(out)),
                           nprocs=args.world, start_method="spawn")
        results = json.loads(out.read_text())
    if args.json:
        print(json.dumps(results, indent=2))
        return
    by = {(r["size"], r["mode"]): r for r in results}
    for name, *_ in SIZES:
        s, p = by[(name, "stream")], by[(name, "sharded")]
        print(f"{name:5} {s['bytes'] / 2**30:5.2f} GiB  stream {s['median_s']:6.2f} s  "
              f"sharded {p['median_s']:6.2f} s  ratio {p['median_s'] / s['median_s']:.2f}")


if __name__ == "__main__":
    main()
