"""Token-level importance-ratio policy-gradient loss against the inference log-probs."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossStats:
    loss_sum: torch.Tensor  # differentiable; already divided by the global loss-token count
    tokens: float
    masked: float  # loss tokens dropped because their ratio left [low, high]
    mismatch_kl_sum: float  # sum over loss tokens of an estimate of KL(inference || trainer)


def rl_loss(
    logprobs: torch.Tensor,
    inference_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    total_tokens: int,
    ratio_low: float,
    ratio_high: float,
) -> LossStats:
    """-(ratio * advantage) per token, where ratio = pi_train / pi_inference.

    The gradient of ratio is ratio * grad(log pi_train): the policy gradient, importance-weighted
    for the gap between the inference policy that sampled the token (an older version, or another
    engine's numerics) and the one being trained. Tokens whose ratio falls outside
    [ratio_low, ratio_high] are masked out rather than clipped, so one wildly off-policy token
    cannot dominate a step. The sum is normalised by the token count of the whole batch, which
    keeps the update independent of how the batch was split into micro-batches and ranks, and
    makes a filler micro-batch (no loss tokens, see orchestrator.batch.shard) add exactly zero.
    """
    log_ratio = logprobs - inference_logprobs
    ratio = torch.exp(log_ratio)
    keep = loss_mask * ((ratio >= ratio_low) & (ratio <= ratio_high)).float()
    loss = -(ratio * advantages * keep).sum() / max(total_tokens, 1)
    with torch.no_grad():
        # k3 estimator: ratio - 1 - log(ratio) >= 0, unbiased for KL(inference || trainer).
        kl = ((ratio - 1 - log_ratio) * loss_mask).sum()
    return LossStats(loss, float(loss_mask.sum()), float((loss_mask - keep).sum()), float(kl))


def sft_loss(logprobs: torch.Tensor, loss_mask: torch.Tensor, total_tokens: int) -> LossStats:
    """Negative log-likelihood of the trained tokens (assistant turns), summed and divided by the
    whole batch's trained-token count, so every token weighs the same however the batch was packed
    and split over micro-batches and ranks."""
    loss = -(logprobs * loss_mask).sum() / max(total_tokens, 1)
    return LossStats(loss, float(loss_mask.sum()), 0.0, 0.0)
