"""One trainer step on the tiny model: fillers and the padding metric."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.config import JobConfig
from training.orchestrator.batch import Rollout, RolloutGroup, collate, pack, to_samples
from training.rundir import RunDir
from training.trainer.__main__ import Trainer


def trainer(tmp: Path, model_dir: Path) -> Trainer:
    cfg = JobConfig()
    cfg.sft.enabled = False
    cfg.model.path = str(model_dir)
    return Trainer(RunDir(tmp), cfg, rank=0, world=1)


def batch(with_fillers: int, packed: bool = False) -> dict[str, object]:
    g = RolloutGroup(
        "t0", 0, [Rollout([1, 7, 8], [9, 10, 6], [-1.0, -2.0, -0.5], r, 0) for r in (1.0, 0.0)]
    )
    g.rollouts[0].advantage, g.rollouts[1].advantage = 0.5, -0.5
    g.rollouts[1].completion = [11, 6]
    g.rollouts[1].logprobs = [-1.5, -0.7]
    mbs = pack(to_samples([g]), micro_batch_tokens=64) + [[] for _ in range(with_fillers)]
    return {"loss_tokens": 5, "micro_batches": [collate(mb, 0, packed) for mb in mbs]}


def test_fillers_change_nothing_but_the_padding_metric(tmp_path: Path, tiny_model_dir: Path) -> None:
    plain, padded = trainer(tmp_path / "a", tiny_model_dir), trainer(tmp_path / "b", tiny_model_dir)
    rec_plain = plain.train_step(batch(0))
    rec_padded = padded.train_step(batch(2))
    assert rec_plain["loss"] == rec_padded["loss"] and rec_plain["loss"] != 0
    for p, q in zip(plain.model.parameters(), padded.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert rec_plain["filler_micro_batches"] == 0 and rec_padded["filler_micro_batches"] == 2
    assert rec_padded["micro_batches"] == 3
    # Rows of 6 and 5 tokens padded to 6 (1 pad slot), plus two one-token fillers.
    assert rec_plain["padding_fraction"] == 1 / 12
    assert rec_padded["padding_fraction"] == 3 / 14


def test_a_packed_batch_trains_like_a_padded_one(tmp_path: Path, tiny_model_dir: Path) -> None:
    padded, packed = trainer(tmp_path / "a", tiny_model_dir), trainer(tmp_path / "b", tiny_model_dir)
    rec_padded = padded.train_step(batch(0))
    rec_packed = packed.train_step(batch(1, packed=True))
    assert rec_packed["loss"] == pytest.approx(rec_padded["loss"], rel=1e-5)
    assert rec_packed["grad_norm"] == pytest.approx(rec_padded["grad_norm"], rel=1e-4)
    for p, q in zip(padded.model.parameters(), packed.model.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    # 11 tokens in one row and a one-token filler: only the filler is padding.
    assert rec_packed["padding_fraction"] == 1 / 12 and rec_packed["micro_batches"] == 2
