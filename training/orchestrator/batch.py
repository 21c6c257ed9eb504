"""Pure pieces of the orchestrator: rollout groups, advantages, staleness, packing, task order."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Rollout:
    prompt: list[int]
    completion: list[int]
    logprobs: list[float]
    reward: float
    version: int  # oldest policy version among the completion's tokens
    advantage: float = 0.0
    truncated: bool = False  # cut off at max_tokens (finish_reason "length")


@dataclass
class RolloutGroup:
    task_id: str
    task_index: int
    rollouts: list[Rollout]
    target: int = 0  # the batch the producer meant the group for
    start_version: int = 0  # policy loaded when its request was sent

    @property
    def version(self) -> int:
        return min(r.version for r in self.rollouts)

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.rollouts]


def group_advantages(rewards: list[float], normalize_std: bool = False, eps: float = 1e-6) -> list[float]:
    """Reward minus the group mean (optionally over the group std): no value model needed."""
    mean = sum(rewards) / len(rewards)
    adv = [r - mean for r in rewards]
    if normalize_std:
        std = statistics.pstdev(rewards)
        adv = [a / (std + eps) for a in adv]
    return adv


def off_policy_lag(step: int, group: RolloutGroup) -> int:
    """How many trainer steps behind the policy that generated the group is, for batch `step`."""
    return step - group.version


def split_stale(
    step: int, groups: list[RolloutGroup], max_off_policy_steps: int
) -> tuple[list[RolloutGroup], list[RolloutGroup]]:
    fresh = [g for g in groups if off_policy_lag(step, g) <= max_off_policy_steps]
    stale = [g for g in groups if off_policy_lag(step, g) > max_off_policy_steps]
    return fresh, stale


@dataclass
class Sample:
    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    advantages: list[float]


def to_samples(groups: list[RolloutGroup], mask_truncated: bool = False) -> list[Sample]:
    """One sample per rollout; the loss covers completion tokens, except, with `mask_truncated`,
    those of completions cut off at max_tokens (their reward judges an answer never finished).
    They still count in their group's advantage baseline."""
    out = []
    for g in groups:
        for r in g.rollouts:
            n_p, n_c = len(r.prompt), len(r.completion)
            weight = 0 if mask_truncated and r.truncated else 1
            out.append(
                Sample(
                    input_ids=r.prompt + r.completion,
                    loss_mask=[0] * n_p + [weight] * n_c,
                    logprobs=[0.0] * n_p + list(r.logprobs),
                    advantages=[0.0] * n_p + [r.advantage] * n_c,
                )
            )
    return out


def pack(samples: list[Sample], micro_batch_tokens: int) -> list[list[Sample]]:
    """First-fit decreasing into micro-batches whose padded size (rows x longest) fits the budget."""
    bins: list[list[Sample]] = []
    for s in sorted(samples, key=lambda s: -len(s.input_ids)):
        for b in bins:
            width = max(len(b[0].input_ids), len(s.input_ids))
            if (len(b) + 1) * width <= micro_batch_tokens:
                b.append(s)
                break
        else:
            bins.append([s])
    return bins


def collate(mb: list[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(s.input_ids) for s in mb)

    def padded(rows: list[list[Any]], fill: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [fill] * (width - len(r)) for r in rows], dtype=dtype)

    return {
        "input_ids": padded([s.input_ids for s in mb], pad_id, torch.long),
        "attention_mask": padded([[1] * len(s.input_ids) for s in mb], 0, torch.long),
        "loss_mask": padded([s.loss_mask for s in mb], 0, torch.float32),
        "logprobs": padded([s.logprobs for s in mb], 0.0, torch.float32),
        "advantages": padded([s.advantages for s in mb], 0.0, torch.float32),
    }


def shard(micro_batches: list[list[Sample]], world_size: int) -> list[list[list[Sample]]]:
    """Deal micro-batches to trainer ranks, largest first, each to the rank with fewest tokens."""
    ranks: list[list[list[Sample]]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for mb in sorted(micro_batches, key=lambda b: -sum(len(s.input_ids) for s in b)):
        r = load.index(min(load))
        ranks[r].append(mb)
        load[r] += sum(len(s.input_ids) for s in mb)
    return ranks


@dataclass
class TaskSampler:
    """Walks the dataset in a seeded order, epoch after epoch; tasks handed back (dropped as stale)
    come first. Its state is part of the orchestrator checkpoint, so a resumed run neither repeats
    nor skips a task."""

    size: int
    seed: int
    epoch: int = 0
    pos: int = 0
    requeued: list[int] = field(default_factory=list)

    def _order(self) -> list[int]:
        idx = list(range(self.size))
        random.Random(self.seed * 7919 + self.epoch).shuffle(idx)
        return idx

    def draw(self, k: int) -> list[int]:
        out = self.requeued[:k]
        self.requeued = self.requeued[k:]
        order = self._order()
        while len(out) < k:
            if self.pos >= self.size:
                self.epoch, self.pos = self.epoch + 1, 0
                order = self._order()
            out.append(order[self.pos])
            self.pos += 1
        return out

    def give_back(self, indices: list[int]) -> None:
        self.requeued = list(indices) + self.requeued

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "seed": self.seed,
            "epoch": self.epoch,
            "pos": self.pos,
            "requeued": list(self.requeued),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["size"] != self.size or state["seed"] != self.seed:
            raise ValueError("checkpointed task order does not match this dataset")
        self.epoch, self.pos, self.requeued = int(state["epoch"]), int(state["pos"]), list(state["requeued"])
