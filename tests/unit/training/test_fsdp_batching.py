"""Sequence packing, equal micro-batch counts per rank, and fillers that change nothing."""

import random
from pathlib import Path
from typing import Any

import pytest
import torch

from training.model import load_model, packed_token_logprobs, token_logprobs
from training.orchestrator.batch import MicroBatch, Sample, collate, filler, pack, shard
from training.trainer.step import accumulate


def sample(rng: random.Random, n: int, prompt: int = 3) -> Sample:
    ids = [rng.randrange(4, 40) for _ in range(n)]
    c = n - prompt
    return Sample(
        input_ids=ids,
        loss_mask=[0] * prompt + [1] * c,
        logprobs=[0.0] * prompt + [rng.uniform(-4.0, -0.5) for _ in range(c)],
        advantages=[0.0] * prompt + [rng.choice([-1.0, 0.5, 1.0])] * c,
    )


def micro_batch_tokens(mb: MicroBatch) -> int:
    return sum(len(s.input_ids) for row in mb for s in row)


@pytest.mark.parametrize("world", range(1, 513))
def test_every_rank_gets_the_same_number_of_micro_batches(world: int) -> None:
    rng = random.Random(world)
    pool: list[MicroBatch] = [[[sample(rng, rng.randrange(4, 30))]] for _ in range(2 * world + 3)]
    for n in sorted({0, 1, world - 1, world, world + 1, 2 * world + 3}):
        mbs = pool[:n]
        ranks = shard(mbs, world)
        assert len(ranks) == world
        counts = {len(r) for r in ranks}
        assert counts == {max(1, -(-n // world))}, (n, counts)
        real = [mb for r in ranks for mb in r if mb]
        assert sorted(map(id, real)) == sorted(map(id, mbs))  # each exactly once
        # Balanced in tokens: the loads differ by at most the largest micro-batch.
        loads = [sum(micro_batch_tokens(mb) for mb in r) for r in ranks]
        assert max(loads) - min(loads) <= max((micro_batch_tokens(mb) for mb in mbs), default=0)


def test_packed_row_matches_documents_run_alone(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir).eval()
    rng = random.Random(0)
    docs = [sample(rng, n) for n in (7, 4, 11, 5)]
    # Row 0 packs three documents, row 1 one document and padding.
    mb = collate([[docs[0], docs[1], docs[2]], [docs[3]]], pad_id=0)
    with torch.no_grad():
        packed = packed_token_logprobs(model, mb["input_ids"], mb["position_ids"], mb["doc_ids"])
        alone = [
            token_logprobs(model, torch.tensor([d.input_ids]), torch.ones(1, len(d.input_ids)))[0]
            for d in docs
        ]
    starts = [(0, 0), (0, 7), (0, 11), (1, 0)]
    for (row, off), d, ref in zip(starts, docs, alone, strict=True):
        got = packed[row, off : off + len(d.input_ids)]
        assert torch.allclose(got, ref, atol=1e-5, rtol=0), (got - ref).abs().max()
    assert packed[1, 5:].abs().sum() == 0  # padding scores nothing
    # Without the block-diagonal mask the later documents would see the earlier ones.
    with torch.no_grad():
        leaky = token_logprobs(model, mb["input_ids"][:1], torch.ones(1, 22))[0, 8:11]
    assert not torch.allclose(leaky, alone[1][1:], atol=1e-3)


def grads_after(
    model: Any, mbs: list[dict[str, torch.Tensor]], loss_tokens: int
) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    st = accumulate(
        model,
        mbs,
        loss_tokens,
        world=1,
        fsdp=False,
        device=torch.device("cpu"),
        temperature=1.0,
        ratio_low=0.125,
        ratio_high=8.0,
    )
    return st.loss, [p.grad.clone() for p in model.parameters()]


def test_fillers_change_neither_loss_nor_gradient(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir)
    rng = random.Random(1)
    samples = [sample(rng, rng.randrange(6, 16)) for _ in range(12)]
    loss_tokens = sum(sum(s.loss_mask) for s in samples)
    mbs = [collate(mb, 0) for mb in pack(samples, micro_batch_tokens=40)]
    assert len(mbs) > 2
    loss, grads = grads_after(model, mbs, loss_tokens)
    padded = [filler(0), mbs[0], filler(0), *mbs[1:], filler(0)]
    loss_f, grads_f = grads_after(model, padded, loss_tokens)
    assert loss != 0 and loss_f == loss
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_f, strict=True))
    # The normalisation is by the batch's loss tokens, so another split gives the same update.
    other = [collate(mb, 0) for mb in pack(samples, micro_batch_tokens=200)]
    assert len(other) < len(mbs)
    loss_o, grads_o = grads_after(model, other, loss_tokens)
    assert loss_o == pytest.approx(loss, abs=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, grads_o, strict=True))


def test_padding_fraction_counts_fillers(tiny_model_dir: Path) -> None:
    model = load_model(tiny_model_dir)
    rng = random.Random(2)
    a, b = sample(rng, 6), sample(rng, 4)
    mb = collate([[a], [b]], 0)  # 12 slots, 2 of them padding
    st = accumulate(
        model,
        [mb, filler(0)],  # the filler: 2 more slots, both padding
        8,
        world=1,
        fsdp=False,
        device=torch.device("cpu"),
        temperature=1.0,
        ratio_low=0.125,
        ratio_high=8.0,
    )
    assert (st.pad_tokens, st.total_tokens) == (4, 14)
    assert st.padding_fraction == pytest.approx(4 / 14)
    assert st.rank_tokens == 10 and st.micro_batches == 2
