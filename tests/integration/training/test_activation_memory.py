"""Activation checkpointing holds less tensor memory for backward, measured with torch's profiler
memory accounting (its Python stack tracing makes this seconds long, hence this tier)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_model import loss_and_grads

from training.config import load_config
from training.model import create_tiny_model
from training.profiling import peak_tensor_bytes

pytestmark = pytest.mark.integration


def test_it_holds_less_for_backward(tmp_path: Path) -> None:
    cfg = load_config(None, ["model.num_hidden_layers=4"])
    path = create_tiny_model(cfg.model, tmp_path / "deep", seed=2)
    ids = torch.randint(4, 40, (1, 256), generator=torch.Generator().manual_seed(0))
    peaks = {ac: peak_tensor_bytes(lambda ac=ac: loss_and_grads(path, ac, ids)) for ac in (False, True)}
    print(f"peak tensor memory: {peaks[False] / 2**20:.1f} MiB without, {peaks[True] / 2**20:.1f} MiB with")
    assert peaks[True] < 0.6 * peaks[False]

