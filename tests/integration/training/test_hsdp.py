"""HSDP on four gloo ranks (CPU): trainer.shard_gpus = 2 builds a (replicate 2, shard 2) mesh, so
each parameter is sharded over two ranks and replicated across the two pairs. The losses follow
one unsharded rank on the same batches within LOSS_TOL (float32 sums in another order: measured
at most 1e-7), and the published version, gathered from one pair only, equals the state the ranks
hold (full_tensor) bit for bit.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from rank_helpers import join_gloo, rank_batches, rl_samples, run_ranks, train_steps

from training.config import ModelConfig
from training.model import create_tiny_model
from training.rundir import free_port
from training.trainer.build import finish
from training.trainer.checkpoint import _collective_publish, build_model, load_initial_weights
from training.weights import iter_checkpoint_tensors, publish_sharded

pytestmark = pytest.mark.integration

STEPS, WORLD, SHARD = 3, 4, 2
LOSS_TOL = 1e-5
TIMEOUT_S = 150.0


def batch(step: int, world: int) -> tuple[list[list[dict[str, torch.Tensor]]], int]:
    return rank_batches(rl_samples(random.Random(200 + step), 8), world)


def train(rank: int, world: int, model_dir: str, port: int, out: str) -> None:
    join_gloo(rank, world, port)
    fsdp = world > 1
    model = build_model(Path(model_dir), "float32", torch.device("cpu"), fsdp=fsdp, shard_gpus=SHARD)
    load_initial_weights(model, Path(model_dir), "float32")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = [st.loss for st in train_steps(model, opt, batch, rank, world, fsdp=fsdp, steps=STEPS)]
    sd = dict(model.state_dict())
    placements = sorted({str(tuple(v.placements)) for v in sd.values() if hasattr(v, "placements")})
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in sd.items()}
    if fsdp:
        publish_sharded(Path(out).with_suffix(".weights"), sd, Path(model_dir), {"version": STEPS},
                        _collective_publish)
    if rank == 0:
        torch.save(full, Path(out).with_suffix(".pt"))
        Path(out).write_text(json.dumps({"losses": losses, "placements": placements}))
    if fsdp:
        finish(world, None)


def test_four_ranks_in_two_shard_pairs_match_one_rank_and_publish_from_one_pair(tmp_path: Path) -> None:
    model_dir = str(create_tiny_model(ModelConfig(arch="glm4_moe"), tmp_path / "model", seed=0))
    out4 = tmp_path / "hsdp.json"
    run_ranks(train, WORLD, (WORLD, model_dir, free_port(), str(out4)), TIMEOUT_S)
    out1 = tmp_path / "single.json"
    train(0, 1, model_dir, 0, str(out1))
    four: dict[str, Any] = json.loads(out4.read_text())
    one: dict[str, Any] = json.loads(out1.read_text())
    assert four["placements"] == ["(Replicate(), Shard(dim=0))"]
    assert one["losses"][-1] != one["losses"][0]
    for a, b in zip(four["losses"], one["losses"], strict=True):
        assert abs(a - b) <= LOSS_TOL, (four["losses"], one["losses"])
    held = torch.load(out4.with_suffix(".pt"))
    from training.weights import LAYOUTS

    published = LAYOUTS["glm4_moe"].fuse(dict(iter_checkpoint_tensors(out4.with_suffix(".weights"))))
    assert published.keys() == held.keys()
    for name, t in held.items():
        assert torch.equal(published[name], t), name
