"""Mixed precision under FSDP2 on two gloo ranks (CPU): the trainer's build (checkpoint.build_model)
keeps master parameters, gradients and AdamW state in float32 while the layers compute in
bfloat16 (MixedPrecisionPolicy), and publication writes the serving dtype. The losses (policy-
gradient surrogates of magnitude 0.01-0.3) follow a float32 run within LOSS_ATOL = 5e-3: bfloat16
keeps 8 bits of mantissa (measured: at most 1.7e-3 over STEPS steps).
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
from training.model import DTYPES, create_tiny_model
from training.rundir import free_port
from training.trainer.build import finish
from training.trainer.checkpoint import _collective_publish, build_model, load_initial_weights
from training.weights import iter_checkpoint_tensors, publish_sharded

pytestmark = pytest.mark.integration

STEPS = 4
LOSS_ATOL = 5e-3
TIMEOUT_S = 120.0


def batch(step: int, world: int) -> tuple[list[list[dict[str, torch.Tensor]]], int]:
    return rank_batches(rl_samples(random.Random(100 + step), 6), world)


def train(rank: int, world: int, model_dir: str, port: int, out: str, compute: str) -> None:
    join_gloo(rank, world, port)
    model = build_model(Path(model_dir), "float32", torch.device("cpu"), fsdp=True, compute_dtype=compute)
    load_initial_weights(model, Path(model_dir), "float32")
    seen: set[torch.dtype] = set()
    model.model.layers[0].mlp.register_forward_hook(lambda _m, _a, o: seen.add(o.dtype))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = [st.loss for st in train_steps(model, opt, batch, rank, world, fsdp=True, steps=STEPS)]
    master = {p.to_local().dtype for p in model.parameters()}
    grads = {p.grad.to_local().dtype for p in model.parameters() if p.grad is not None}
    state = {v.dtype for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0}
    publish_sharded(Path(out).with_suffix(".weights"), dict(model.state_dict()), Path(model_dir),
                    {"version": 1}, _collective_publish, DTYPES["bfloat16"])
    if rank == 0:
        Path(out).write_text(json.dumps({"losses": losses, "computed": sorted(map(str, seen)),
                                         "master": sorted(map(str, master)), "grads": sorted(map(str, grads)),
                                         "optimizer": sorted(map(str, state))}))
    finish(world, None)


def run(model_dir: Path, out: Path, compute: str) -> dict[str, Any]:
    run_ranks(train, 2, (2, str(model_dir), free_port(), str(out), compute), TIMEOUT_S)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_bf16_compute_keeps_fp32_master_state_and_publishes_the_serving_dtype(tmp_path: Path) -> None:
    model_dir = create_tiny_model(ModelConfig(arch="glm4_moe"), tmp_path / "model", seed=0)
    mixed = run(model_dir, tmp_path / "mixed.json", "bfloat16")
    full = run(model_dir, tmp_path / "full.json", "float32")
    assert mixed["computed"] == ["torch.bfloat16"] and full["computed"] == ["torch.float32"]
    for key in ("master", "grads", "optimizer"):
        assert mixed[key] == ["torch.float32"], (key, mixed[key])
    for a, b in zip(mixed["losses"], full["losses"], strict=True):
        assert a == pytest.approx(b, abs=LOSS_ATOL), (mixed["losses"], full["losses"])
    assert mixed["losses"] != full["losses"]  # the layers really ran in bfloat16
    published = dict(iter_checkpoint_tensors(tmp_path / "mixed.weights"))
    router = {n for n in published if ".mlp.gate." in n}  # float32 in transformers whatever the dtype
    assert {t.dtype for n, t in published.items() if n not in router} == {torch.bfloat16}
    assert {published[n].dtype for n in router} == {torch.float32}
    assert "model.layers.1.mlp.experts.0.gate_proj.weight" in published
