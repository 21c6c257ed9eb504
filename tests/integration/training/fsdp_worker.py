"""One trainer rank for test_fsdp_cpu: a few steps on fixed batches through the real Trainer.

    RANK=r WORLD_SIZE=w MASTER_ADDR=... MASTER_PORT=... python fsdp_worker.py MODEL_DIR OUT_DIR FSDP

Every rank builds the same batches (3 micro-batches of unequal size per step), shards them with
the orchestrator's shard() and trains; rank 0 writes the per-step losses and final weights.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from training.config import JobConfig
from training.orchestrator.batch import Rollout, RolloutGroup, collate, shard, to_samples
from training.rundir import RunDir
from training.trainer.__main__ import Trainer

STEPS = 3


def groups(step: int) -> list[RolloutGroup]:
    gen = torch.Generator().manual_seed(step)
    out = []
    for g in range(3):
        rollouts = []
        for i in range(2):
            n = 2 + (g * 3 + i + step) % 5
            toks = torch.randint(4, 40, (n,), generator=gen).tolist()
            lps = (-torch.rand(n, generator=gen) * 3).tolist()
            rollouts.append(Rollout([1, 5 + g, 6], toks, lps, float(i), 0, advantage=0.5 - i))
        out.append(RolloutGroup(f"t{g}", g, rollouts))
    return out


def main() -> None:
    model_dir, out, fsdp = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    cfg = JobConfig()
    cfg.sft.enabled = False
    cfg.model.path = str(model_dir)
    cfg.trainer.world_size, cfg.trainer.fsdp, cfg.trainer.lr = world, fsdp, 1e-2
    trainer = Trainer(RunDir(out), cfg, rank, world)
    losses, counts = [], []
    for step in range(STEPS):
        # One micro-batch per group: three micro-batches, so two ranks get 2 and 1 before fillers.
        micro = [to_samples([g]) for g in groups(step)]
        samples = [s for mb in micro for s in mb]
        mbs = shard(micro, world)[rank]
        counts.append(len(mbs))
        batch = {"loss_tokens": sum(int(sum(s.loss_mask)) for s in samples),
                 "micro_batches": [collate(mb, 0, packed=True) for mb in mbs]}
        losses.append(trainer.train_step(batch)["loss"])
    weights = trainer.full_state()
    if rank == 0:
        save_file(weights, str(out / "model.safetensors"))
        (out / "result.json").write_text(json.dumps({"losses": losses, "micro_batches": counts}))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
