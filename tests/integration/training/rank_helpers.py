"""Helpers for tests that run several trainer ranks as spawned processes on gloo (CPU): synthetic
RL samples dealt into per-rank micro-batches, the ranks' process group and training loop, and a run
that fails the test instead of hanging when a collective never completes."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.orchestrator.batch import Sample, collate, pack, shard
from training.trainer.step import StepStats, accumulate

Batches = Callable[[int, int], tuple[list[list[dict[str, torch.Tensor]]], int]]


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


def join_gloo(rank: int, world: int, port: int) -> None:
    """One thread, seed 0, and (world > 1) the gloo process group on 127.0.0.1:port."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)


def train_steps(model: Any, opt: torch.optim.Optimizer, batches: Batches, rank: int, world: int, *,
                fsdp: bool, steps: int, clip: float | None = None,
                around: tuple[Callable[[], None], Callable[[], None]] | None = None) -> list[StepStats]:
    """The trainer's step (training.trainer.step.accumulate, chunked log-probs) on this rank's share of
    batches(step, world), `steps` updates, then one more pass that only measures the loss after the
    last. `around`: called before and after each pass's forward/backward."""
    out = []
    for step in range(steps + 1):
        ranks, tokens = batches(step, world)
        opt.zero_grad(set_to_none=True)
        if around:
            around[0]()
        out.append(accumulate(model, ranks[rank], tokens, world=world, fsdp=fsdp, device=torch.device("cpu"),
                              temperature=1.0, ratio_low=0.125, ratio_high=8.0, chunk_tokens=16))
        if around:
            around[1]()
        if step < steps:
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
    return out
