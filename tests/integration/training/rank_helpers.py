"""Helpers for tests that run several trainer ranks as spawned processes on gloo (CPU): synthetic
RL samples dealt into per-rank micro-batches, and a run that fails the test instead of hanging
when a collective never completes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from training.orchestrator.batch import Sample, collate, pack, shard


def rl_samples(rng: random.Random, count: int, shortest: int = 8, prompt: int = 3) -> list[Sample]:
    """`count` completions of 4-39 token ids after a `prompt`-token prompt, with inference log-probs
    and +-1 advantages."""
    out = []
    for _ in range(count):
        n = rng.randrange(shortest, 20)
        out.append(Sample(
            input_ids=[rng.randrange(4, 40) for _ in range(n)],
            loss_mask=[0] * prompt + [1] * (n - prompt),
            logprobs=[0.0] * prompt + [rng.uniform(-4.0, -1.0) for _ in range(n - prompt)],
            advantages=[0.0] * prompt + [rng.choice([-1.0, 1.0])] * (n - prompt),
        ))
    return out


def rank_batches(samples: list[Sample], world: int) -> tuple[list[list[dict[str, torch.Tensor]]], int]:
    """Each rank's collated micro-batches (rows of 20 tokens, 40 per micro-batch) and the batch's
    loss-token count."""
    tokens = sum(sum(s.loss_mask) for s in samples)
    return [[collate(mb, 0) for mb in r] for r in shard(pack(samples, 40, row_tokens=20), world)], tokens


def run_ranks(fn: Callable[..., None], world: int, args: tuple[Any, ...], timeout_s: float) -> None:
    """fn(rank, *args) in `world` spawned processes; the test fails (and the ranks are killed) when
    they do not all finish within `timeout_s`: a hung collective."""
    ctx = mp.start_processes(fn, args=args, nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                pytest.fail(f"{world} ranks did not finish in {timeout_s:.0f}s (hung collective?)")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
