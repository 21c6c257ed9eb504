"""Pure pieces of the orchestrator: rollout groups, advantages, staleness, packing, task order."""

from __future__ import annotations

import heapq
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
    truncated: bool = False  # hit max_tokens without a stop


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


def to_samples(groups: list[RolloutGroup], mask_truncated: bool = True) -> list[Sample]:
    """Trainer samples; with mask_truncated a completion cut off by max_tokens carries no loss.

    Its reward still counts in its group's baseline (it was a real outcome of the policy), but
    its tokens are not pushed either way: the cut, not the tokens, decided that reward, and a
    masked token also leaves the loss normaliser, unlike a zero advantage, which would still
    dilute every other token's weight."""
    out = []
    for g in groups:
        for r in g.rollouts:
            n_p, n_c = len(r.prompt), len(r.completion)
            trained = 0 if (mask_truncated and r.truncated) else 1
            out.append(
                Sample(
                    input_ids=r.prompt + r.completion,
                    loss_mask=[0] * n_p + [trained] * n_c,
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


def pack_sequences(samples: list[Sample], micro_batch_tokens: int) -> list[list[Sample]]:
    """First-fit decreasing into micro-batches of one packed row each, at most micro_batch_tokens
    long (a longer sample gets a row of its own): no padding at all."""
    bins: list[list[Sample]] = []
    room: list[int] = []
    for s in sorted(samples, key=lambda s: -len(s.input_ids)):
        n = len(s.input_ids)
        for i, left in enumerate(room):
            if n <= left:
                bins[i].append(s)
                room[i] -= n
                break
        else:
            bins.append([s])
            room.append(micro_batch_tokens - n)
    return bins


def tokens(mb: list[Sample]) -> int:
    return sum(len(s.input_ids) for s in mb)


def collate(mb: list[Sample], pad_id: int, packed: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of one micro-batch.

    Padded: one right-padded row per sample with an attention mask. Packed: the samples back to
    back in a single row with position_ids restarting at 0 for each, and no attention mask: the
    model (transformers' packed-sequence detection) then attends block-diagonally, each sample
    only to itself, as if it had run alone.

    An empty micro-batch is a filler: one pad token that attends to itself (a fully masked row
    would give NaN) and carries no loss, so the forward/backward and their collectives still run
    on a rank that has nothing to train on."""
    filler = not mb
    rows = [Sample([pad_id], [0], [0.0], [0.0])] if filler else mb
    if packed:
        return {
            "input_ids": torch.tensor([[t for s in rows for t in s.input_ids]], dtype=torch.long),
            "position_ids": torch.tensor([[i for s in rows for i in range(len(s.input_ids))]]),
            "loss_mask": torch.tensor([[m for s in rows for m in s.loss_mask]], dtype=torch.float32),
            "logprobs": torch.tensor([[x for s in rows for x in s.logprobs]], dtype=torch.float32),
            "advantages": torch.tensor([[a for s in rows for a in s.advantages]], dtype=torch.float32),
            "filler": torch.tensor(int(filler)),
        }
    width = max(len(s.input_ids) for s in rows)

    def padded(rows_: list[list[Any]], fill: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [fill] * (width - len(r)) for r in rows_], dtype=dtype)

    return {
        "input_ids": padded([s.input_ids for s in rows], pad_id, torch.long),
        "attention_mask": padded([[1] * len(s.input_ids) for s in rows], 0, torch.long),
        "loss_mask": padded([s.loss_mask for s in rows], 0, torch.float32),
        "logprobs": padded([s.logprobs for s in rows], 0.0, torch.float32),
        "advantages": padded([s.advantages for s in rows], 0.0, torch.float32),
        "filler": torch.tensor(int(filler)),
    }


def _split(mb: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """Two halves of about equal tokens: longest first, each to the lighter half."""
    halves: tuple[list[Sample], list[Sample]] = ([], [])
    for s in sorted(mb, key=lambda s: -len(s.input_ids)):
        min(halves, key=tokens).append(s)
    return halves


def shard(micro_batches: list[list[Sample]], world_size: int) -> list[list[list[Sample]]]:
    """Micro-batches per trainer rank, the same number on every rank.

    Under FSDP every forward/backward issues collectives, so a rank with fewer micro-batches
    than its peers would leave them waiting forever. Each rank gets ceil(n / world) micro-batches:
    real ones dealt largest first to the least-loaded rank that still has room, then empty ones
    (fillers, see collate) up to the common count. When there are fewer micro-batches than ranks,
    multi-sample micro-batches are split first so that more ranks get real work."""
    bins = [list(mb) for mb in micro_batches if mb]
    while len(bins) < world_size:
        splittable = [b for b in bins if len(b) > 1]
        if not splittable:
            break
        big = max(splittable, key=tokens)
        bins.remove(big)
        bins.extend(_split(big))
    per_rank = max(1, -(-len(bins) // world_size))
    ranks: list[list[list[Sample]]] = [[] for _ in range(world_size)]
    room = [(0, r) for r in range(world_size)]  # (tokens so far, rank) of ranks with room left
    for mb in sorted(bins, key=lambda b: -tokens(b)):
        load, r = heapq.heappop(room)
        ranks[r].append(mb)
        if len(ranks[r]) < per_rank:
            heapq.heappush(room, (load + tokens(mb), r))
    for mbs in ranks:
        mbs.extend([] for _ in range(per_rank - len(mbs)))
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
