"""Sequence packing: samples back to back in one row train exactly as if each ran alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.config import ModelConfig
from training.model import create_tiny_model, load_model, token_logprobs
from training.orchestrator.batch import Sample, collate, pack_sequences


def sample(ids: list[int], n_completion: int) -> Sample:
    n_prompt = len(ids) - n_completion
    return Sample(ids, [0] * n_prompt + [1] * n_completion, [-1.0] * len(ids), [0.5] * len(ids))


def test_pack_sequences_fills_rows_up_to_the_budget() -> None:
    samples = [sample([1] * n, 2) for n in (7, 3, 5, 4, 2, 9)]
    bins = pack_sequences(samples, micro_batch_tokens=10)
    assert sorted(id(s) for b in bins for s in b) == sorted(map(id, samples))
    assert all(sum(len(s.input_ids) for s in b) <= 10 for b in bins)
    assert [[len(s.input_ids) for s in b] for b in bins] == [[9], [7, 3], [5, 4], [2]]
    assert pack_sequences([sample([1] * 12, 2)], 10) == [[sample([1] * 12, 2)]]  # too long: alone


def test_packed_row_has_positions_per_sample_and_no_padding() -> None:
    mb = collate([sample([1, 2, 3], 1), sample([1, 4], 1)], pad_id=0, packed=True)
    assert mb["input_ids"].tolist() == [[1, 2, 3, 1, 4]]
    assert mb["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert mb["loss_mask"].tolist() == [[0, 0, 1, 0, 1]]
    assert "attention_mask" not in mb and int(mb["filler"]) == 0
    filler = collate([], pad_id=0, packed=True)
    assert filler["input_ids"].tolist() == [[0]] and filler["loss_mask"].sum() == 0
    assert int(filler["filler"]) == 1


@pytest.mark.parametrize("arch", ["qwen3", "llama", "glm4_moe"])
def test_packed_logprobs_equal_each_sample_alone(tmp_path: Path, arch: str) -> None:
    torch.set_num_threads(1)
    model = load_model(create_tiny_model(ModelConfig(arch=arch), tmp_path / arch, seed=1))
    gen = torch.Generator().manual_seed(0)
    docs = [torch.randint(4, 40, (n,), generator=gen).tolist() for n in (7, 3, 11, 5)]
    mb = collate([sample(d, 2) for d in docs], pad_id=0, packed=True)
    with torch.no_grad():
        packed = token_logprobs(model, mb["input_ids"], None, 1.0, mb["position_ids"])[0]
        off = 0
        for d in docs:
            ids = torch.tensor([d])
            alone = token_logprobs(model, ids, torch.ones_like(ids))[0]
            # Token 0 of each sample is conditioned on the previous one in the packed row: skipped,
            # it is a prompt token and never in the loss.
            assert torch.allclose(packed[off + 1 : off + len(d)], alone[1:], atol=1e-5), arch
            off += len(d)
