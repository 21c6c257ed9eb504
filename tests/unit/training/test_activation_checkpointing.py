"""Activation checkpointing in the trainer's model (trainer.activation_checkpointing): the same
gradients. (The memory it saves: tests/integration/training/test_activation_memory.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_model import loss_and_grads

from training.config import load_config
from training.model import create_tiny_model


@pytest.mark.parametrize("arch", ["qwen3", "glm4_moe"])
def test_the_same_gradients_with_and_without(tmp_path: Path, arch: str) -> None:
    path = create_tiny_model(load_config(None, [f"model.arch={arch}"]).model, tmp_path / arch, seed=2)
    ids = torch.randint(4, 40, (2, 24), generator=torch.Generator().manual_seed(0))
    (lp0, g0), (lp1, g1) = loss_and_grads(path, False, ids), loss_and_grads(path, True, ids)
    assert torch.allclose(lp0, lp1, atol=1e-6) and g0.keys() == g1.keys() and g0
    for name in g0:
        assert torch.allclose(g0[name], g1[name], atol=1e-6), name
