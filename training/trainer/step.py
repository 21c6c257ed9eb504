"""Gradient accumulation over one rank's micro-batches, safe under FSDP.

Every forward and backward of an FSDP-sharded model is a collective (all-gather of parameters,
reduce-scatter of gradients), so all ranks must run the same number of micro-batches or the step
hangs. The orchestrator already deals equal counts (`orchestrator.batch.shard`); the ranks also
agree on the count here and pad with fillers, so a batch written any other way cannot hang them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from training.model import packed_token_logprobs, token_logprobs
from training.orchestrator.batch import filler
from training.trainer.loss import rl_loss, sft_loss


@dataclass
class StepStats:
    loss: float  # summed over ranks: the batch's loss
    loss_tokens: float
    masked: float
    mismatch_kl_sum: float
    pad_tokens: float  # over every rank's micro-batches, fillers included
    total_tokens: float
    rank_tokens: int  # real tokens on this rank
    micro_batches: int  # per rank, after equalising

    @property
    def padding_fraction(self) -> float:
        return self.pad_tokens / max(self.total_tokens, 1.0)


def equalise(
    micro_batches: list[dict[str, torch.Tensor]], world: int, device: torch.device
) -> list[dict[str, torch.Tensor]]:
    """Pad this rank's micro-batches with fillers up to the largest count on any rank. The filler's
    token id does not matter: no real token attends to it and it carries no loss."""
    mbs = list(micro_batches)
    if world > 1:
        n = torch.tensor([len(mbs)], dtype=torch.int64, device=device)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        mbs += [filler(pad_id=0) for _ in range(int(n.item()) - len(mbs))]
    return mbs


def accumulate(
    model: Any,
    micro_batches: list[dict[str, torch.Tensor]],
    loss_tokens: int,
    *,
    world: int,
    fsdp: bool,
    device: torch.device,
    temperature: float,
    ratio_low: float,
    ratio_high: float,
    chunk_tokens: int = 0,
    objective: str = "rl",
) -> StepStats:
    """Forward/backward every micro-batch into .grad (the caller zeroes grads and steps).

    Each micro-batch's loss is already divided by the whole batch's loss-token count, so summing
    over micro-batches and ranks gives the batch mean whatever the split; fillers have no loss
    tokens and add exactly zero. FSDP averages gradients over ranks, hence the `world` factor;
    without FSDP the gradients are summed here with an all-reduce. `objective` "sft" trains the
    loss-mask tokens by likelihood (chat SFT) instead of the policy-gradient loss.
    """
    mbs = equalise(micro_batches, world, device)
    scale = world if fsdp else 1
    loss_sum = torch.zeros((), device=device)
    # loss tokens, masked, kl, pad tokens, all tokens
    stats = torch.zeros(5, dtype=torch.float64)
    rank_tokens = 0
    for mb in mbs:
        mb = {k: v.to(device) for k, v in mb.items()}
        if "doc_ids" in mb:
            lp = packed_token_logprobs(model, mb["input_ids"], mb["position_ids"], mb["doc_ids"], temperature,
                                       chunk_tokens)
        else:  # a batch written before sequence packing (one document per row)
            lp = token_logprobs(model, mb["input_ids"], mb["attention_mask"], temperature, chunk_tokens)
        if objective == "sft":
            st = sft_loss(lp, mb["loss_mask"], loss_tokens)
        else:
            st = rl_loss(
                lp, mb["logprobs"], mb["advantages"], mb["loss_mask"], loss_tokens, ratio_low, ratio_high
            )
        (st.loss_sum * scale).backward()
        loss_sum += st.loss_sum.detach()
        real, numel = int(mb["attention_mask"].sum()), int(mb["attention_mask"].numel())
        row = [st.tokens, st.masked, st.mismatch_kl_sum, numel - real, numel]
        stats += torch.tensor(row, dtype=torch.float64)
        rank_tokens += real
    if world > 1:
        if not fsdp:
            for p in model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        red = stats.to(device)
        dist.all_reduce(red, op=dist.ReduceOp.SUM)
        stats = red.cpu()
    tokens, masked, kl, pad, total = (float(x) for x in stats)
    return StepStats(float(loss_sum), tokens, masked, kl, pad, total, rank_tokens, len(mbs))
