"""Pure pieces of the orchestrator: rollout groups, advantages, staleness, packing, task order."""

from __future__ import annotations

import heapq
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from training.orchestrator.turns import Turn, merge_turns


@dataclass
class Rollout:
    prompt: list[int]
    completion: list[int]
    logprobs: list[float]
    reward: float
    version: int  # oldest policy version among the completion's tokens
    advantage: float = 0.0
    truncated: bool = False  # cut off at max_tokens (finish_reason "length")
    parts: dict[str, float] = field(default_factory=dict)  # the rubric's reward components
    # A verifiers environment's rollout: its turns (prompt, completion and completion above are the
    # first turn's, for display) and the error inside the environment that ended it, if any.
    turns: list[Turn] | None = None
    error: str | None = None


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


def to_samples(groups: list[RolloutGroup], mask_truncated: bool = False, step: int | None = None,
               max_off_policy_steps: int | None = None) -> list[Sample]:
    """One sample per rollout (per merged run of turns for a multi-turn one); the loss covers
    sampled tokens, except, with `mask_truncated`, those of completions cut off at max_tokens (their
    reward judges an answer never finished), those of a rollout an environment error ended, and a
    turn more than `max_off_policy_steps` behind `step`. Masked rollouts still count in their group's
    advantage baseline."""
    out = []
    for g in groups:
        for r in g.rollouts:
            weight = 0 if (mask_truncated and r.truncated) or r.error else 1
            if r.turns is not None:
                out.extend(_turn_samples(r, weight, step, max_off_policy_steps))
                continue
            n_p, n_c = len(r.prompt), len(r.completion)
            out.append(
                Sample(
                    input_ids=r.prompt + r.completion,
                    loss_mask=[0] * n_p + [weight] * n_c,
                    logprobs=[0.0] * n_p + list(r.logprobs),
                    advantages=[0.0] * n_p + [r.advantage] * n_c,
                )
            )
    return out


def _turn_samples(r: Rollout, weight: int, step: int | None, max_off_policy_steps: int | None
                  ) -> list[Sample]:
    out = []
    for ts in merge_turns(r.turns or [], step, max_off_policy_steps):
        mask = [m * weight for m in ts.loss_mask]
        out.append(Sample(ts.input_ids, mask, ts.logprobs, [r.advantage if m else 0.0 for m in mask]))
    return out


# A row is one sequence of the model's input: several samples (documents) packed end to end,
# each with its own positions and attending only to itself. A micro-batch is a list of rows, all
# padded to the widest; the empty micro-batch is a filler (see `shard`).
Row = list[Sample]
MicroBatch = list[Row]

# Width of a filler micro-batch: two pad tokens, so the forward has one next-token prediction and
# the backward reaches every parameter (zero gradient) and runs every collective.
FILLER_TOKENS = 2


def _first_fit(items: list[tuple[int, Any]], fits: Any) -> list[list[Any]]:
    """First-fit decreasing on (size, item) pairs; `fits(sizes_in_bin, size)` says if it fits."""
    bins: list[list[Any]] = []
    sizes: list[list[int]] = []
    for n, item in sorted(items, key=lambda x: -x[0]):
        for b, bs in zip(bins, sizes, strict=True):
            if fits(bs, n):
                b.append(item)
                bs.append(n)
                break
        else:
            bins.append([item])
            sizes.append([n])
    return bins


def pack(samples: list[Sample], micro_batch_tokens: int, row_tokens: int | None = None) -> list[MicroBatch]:
    """Sequence packing: samples go first-fit decreasing into rows of at most `row_tokens` tokens
    (default `micro_batch_tokens`; a longer sample gets a row of its own), then rows go first-fit
    decreasing into micro-batches whose padded size (rows x widest row) fits `micro_batch_tokens`."""
    cap = row_tokens or micro_batch_tokens
    rows: list[Row] = _first_fit(
        [(len(s.input_ids), s) for s in samples], lambda sizes, n: sum(sizes) + n <= cap
    )
    return _first_fit(
        [(row_len(r), r) for r in rows],
        lambda sizes, n: (len(sizes) + 1) * max(max(sizes), n) <= micro_batch_tokens,
    )


def row_len(row: Row) -> int:
    return sum(len(s.input_ids) for s in row)


def mb_tokens(mb: MicroBatch) -> int:
    """Real (non-pad) tokens: the work a micro-batch costs its rank."""
    return sum(row_len(r) for r in mb)


def collate(mb: MicroBatch, pad_id: int) -> dict[str, torch.Tensor]:
    """Tensors [rows, width] for the trainer. `position_ids` restart at 0 for every document and
    `doc_ids` number the documents of a row (-1 on padding), from which the trainer builds a
    block-diagonal causal mask. The filler (empty micro-batch) is one row of padding with no
    loss tokens."""
    rows = mb or [[]]
    width = max([row_len(r) for r in rows] + [1 if mb else FILLER_TOKENS])
    out: dict[str, list[list[Any]]] = {
        k: [] for k in ("input_ids", "position_ids", "doc_ids", "loss_mask", "logprobs", "advantages")
    }
    for row in rows:
        cols: dict[str, list[Any]] = {k: [] for k in out}
        for d, s in enumerate(row):
            n = len(s.input_ids)
            cols["input_ids"] += s.input_ids
            cols["position_ids"] += list(range(n))
            cols["doc_ids"] += [d] * n
            cols["loss_mask"] += s.loss_mask
            cols["logprobs"] += s.logprobs
            cols["advantages"] += s.advantages
        pad = width - len(cols["input_ids"])
        fills: dict[str, Any] = {
            "input_ids": pad_id,
            "position_ids": 0,
            "doc_ids": -1,
            "loss_mask": 0,
            "logprobs": 0.0,
            "advantages": 0.0,
        }
        for k, v in cols.items():
            out[k].append(v + [fills[k]] * pad)
    dtypes = {"input_ids": torch.long, "position_ids": torch.long, "doc_ids": torch.long}
    t = {k: torch.tensor(v, dtype=dtypes.get(k, torch.float32)) for k, v in out.items()}
    t["attention_mask"] = (t["doc_ids"] >= 0).long()
    return t


def filler(pad_id: int) -> dict[str, torch.Tensor]:
    return collate([], pad_id)


def shard(micro_batches: list[MicroBatch], world_size: int) -> list[list[MicroBatch]]:
    """Deal micro-batches to ranks so that every rank gets the SAME number of them: under FSDP
    each forward/backward issues collectives, and a rank with fewer micro-batches would leave the
    others waiting forever. Each rank gets ceil(n / world) (at least one); micro-batches go
    largest first to the least-loaded rank (in real tokens) that still has room, and the rest of
    each rank's slots are fillers (empty micro-batches, zero loss tokens), which change neither
    the loss nor the gradient."""
    per_rank = max(1, -(-len(micro_batches) // world_size))
    ranks: list[list[MicroBatch]] = [[] for _ in range(world_size)]
    open_ranks = [(0, r) for r in range(world_size)]  # (load, rank) of ranks with a free slot
    for mb in sorted(micro_batches, key=lambda b: -mb_tokens(b)):
        load, dest = heapq.heappop(open_ranks)
        ranks[dest].append(mb)
        if len(ranks[dest]) < per_rank:
            heapq.heappush(open_ranks, (load + mb_tokens(mb), dest))
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
