"""GPU check of the MoE training path: the GLM-4.5-Air-architecture model at a mid size on one
CUDA device, as the trainer runs it there.

    python bench/gpu/check_moe.py [--json-out FILE] [--steps 3] [--tokens 8192]

An NCCL process group of one rank; the model built on the meta device and sharded by FSDP2 with
float32 master weights and bfloat16 compute (MixedPrecisionPolicy), activation checkpointing and
chunked log-probs, filled row by row from the base checkpoint's per-expert tensors. Then:

1. `--steps` RL steps on packed micro-batches of `--tokens` tokens: finite losses that change,
   tokens/s, and torch.cuda.max_memory_allocated against the launch planner's figure for the same
   model and layout (opsctl/launch/plan.py; reported, the CPU test bounds it at 15%).
2. A publication in bfloat16 (training/weights.py): per-expert release names, loaded back by the
   built-in server's reader, equal to the trained weights cast to bfloat16.

Needs CUDA; without it, prints one line and exits 2. Prints one JSON verdict and exits 0 when every
check passed, else 1.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from opsctl.launch.plan import ModelShape, TrainLayout, memory  # noqa: E402
from training.config import ModelConfig  # noqa: E402
from training.fsutil import publish_dir  # noqa: E402
from training.model import create_tiny_model  # noqa: E402
from training.orchestrator.batch import Sample, collate, pack, shard  # noqa: E402
from training.trainer.checkpoint import build_model, load_initial_weights  # noqa: E402
from training.trainer.step import accumulate  # noqa: E402
from training.weights import iter_checkpoint_tensors, load_trainer_state, publish_sharded  # noqa: E402

MOE = ModelConfig(arch="glm4_moe", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, head_dim=64, moe_intermediate_size=352,
                  n_routed_experts=32, num_experts_per_tok=4)
ROW, CHUNK = 1024, 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def micro_batches(tokens: int, step: int) -> tuple[list[dict[str, torch.Tensor]], int]:
    rng, samples = random.Random(step), []
    while sum(len(s.input_ids) for s in samples) < tokens:
        n = rng.randrange(ROW // 4, ROW)
        samples.append(Sample(input_ids=[rng.randrange(4, 40) for _ in range(n)],
                              loss_mask=[0] * 8 + [1] * (n - 8),
                              logprobs=[0.0] * 8 + [rng.uniform(-3.0, -0.5) for _ in range(n - 8)],
                              advantages=[0.0] * 8 + [rng.choice([-1.0, 1.0])] * (n - 8)))
    (mbs,) = shard(pack(samples, tokens, row_tokens=ROW), 1)
    return [collate(mb, 0) for mb in mbs], sum(sum(s.loss_mask) for s in samples)


def run(tmp: Path, dev: torch.device, steps: int, tokens: int) -> dict[str, Any]:
    path = create_tiny_model(MOE, tmp / "base", seed=0)
    model = build_model(path, "float32", dev, fsdp=True, activation_checkpointing=True,
                        compute_dtype="bfloat16")
    load_initial_weights(model, path, "float32")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    torch.cuda.reset_peak_memory_stats(dev)
    losses, t0, seen = [], time.perf_counter(), 0
    for step in range(steps):
        mbs, loss_tokens = micro_batches(tokens, step)
        mbs = [{k: v.to(dev) for k, v in mb.items()} for mb in mbs]
        opt.zero_grad(set_to_none=True)
        st = accumulate(model, mbs, loss_tokens, world=1, fsdp=True, device=dev, temperature=1.0,
                        ratio_low=0.125, ratio_high=8.0, chunk_tokens=CHUNK)
        opt.step()
        losses.append(st.loss)
        seen += sum(int(mb["attention_mask"].sum()) for mb in mbs)
    torch.cuda.synchronize(dev)
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(dev)
    shape = ModelShape.from_hf(json.loads((path / "config.json").read_text()))
    planned = memory(shape, TrainLayout(1, 1, tokens, ROW, CHUNK, True, 4, 2, 2, 1)).peak

    sd = dict(model.state_dict())
    publish_sharded(tmp / "step_1", sd, path, {"version": steps},
                    lambda f, marker, info, fill: publish_dir(f, fill, marker, info), torch.bfloat16)
    fp32 = ("e_score_correction_bias", "gate.weight")  # transformers keeps GLM-4.5's router in float32
    held = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).cpu() for k, v in sd.items()}
    held = {k: v if any(p in k for p in fp32) else v.to(torch.bfloat16) for k, v in held.items()}
    back = load_trainer_state(tmp / "step_1")
    names = {n for n, _ in iter_checkpoint_tensors(tmp / "step_1")}
    return {
        "params": shape.total,
        "losses": losses,
        "tokens_per_s": round(seen / wall, 1),
        "peak_mib": round(peak / 2**20, 1),
        "planned_mib": round(planned / 2**20, 1),
        "plan_ratio": round(planned / peak, 3),
        "published_equal": back.keys() == held.keys() and all(torch.equal(back[k], held[k]) for k in held),
        "per_expert_names": "model.layers.1.mlp.experts.31.down_proj.weight" in names,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=8192)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("check_moe: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            device_id=dev)
    try:
        with tempfile.TemporaryDirectory() as d:
            result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
            result.update(run(Path(d), dev, args.steps, args.tokens))
    finally:
        dist.destroy_process_group()
    losses = result["losses"]
    result["ok"] = bool(all(torch.isfinite(torch.tensor(losses))) and len(set(losses)) > 1
                        and result["published_equal"] and result["per_expert_names"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
