"""The trainer's model as the trainer builds it, through one forward and backward (tests/ is on
sys.path through its conftest.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from training.model import packed_token_logprobs
from training.trainer.checkpoint import build_model, load_initial_weights


def loss_and_grads(path: Path, ac: bool, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model = build_model(path, "float32", torch.device("cpu"), fsdp=False, activation_checkpointing=ac)
    load_initial_weights(model, path, "float32")
    model.train()
    pos = torch.arange(ids.shape[1]).expand_as(ids)
    lp = packed_token_logprobs(model, ids, pos, torch.zeros_like(ids), 1.0, chunk_tokens=0)
    lp.sum().backward()
    return lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
