"""Packed rows without a dense mask (trainer.attention = "varlen", training/varlen.py): each
document's log-probabilities equal the document scored alone within 1e-4 (dense and MoE), the
gradients equal the mask path's, no [T, T] mask is built, and a filler micro-batch still runs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from training import model as tmodel
from training.config import ModelConfig
from training.model import create_tiny_model, packed_token_logprobs, token_logprobs
from training.orchestrator.batch import Sample, collate, filler, pack
from training.varlen import VARLEN

TOL = 1e-4


def docs(seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for n in (9, 5, 13, 7, 11, 4, 16):
        ids = [rng.randrange(4, 40) for _ in range(n)]
        out.append(Sample(input_ids=ids, loss_mask=[0, 0] + [1] * (n - 2), logprobs=[0.0] * n,
                          advantages=[1.0] * n))
    return out


@pytest.fixture(scope="module", params=["qwen3", "glm4_moe"])
def models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    path = create_tiny_model(ModelConfig(arch=request.param), tmp_path_factory.mktemp("m"), seed=0)
    plain = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    varlen = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation=VARLEN)
    return plain, varlen


def test_each_packed_document_equals_the_document_alone_without_a_mask(
    models: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, varlen = models
    samples = docs(0)
    rows = [samples[:3], samples[3:5], samples[5:]]  # 27, 18 and 20 tokens: two rows padded
    mb = collate(rows, pad_id=0)
    monkeypatch.setattr(tmodel, "packed_attention_mask",
                        lambda *a: pytest.fail("the varlen path built a dense mask"))
    with torch.no_grad():
        got = packed_token_logprobs(varlen, mb["input_ids"], mb["position_ids"], mb["doc_ids"])
    assert torch.equal(got[mb["doc_ids"] < 0], torch.zeros_like(got[mb["doc_ids"] < 0]))
    for r, row in enumerate(rows):
        for d, s in enumerate(row):
            ids = torch.tensor([s.input_ids])
            with torch.no_grad():
                alone = token_logprobs(plain, ids, torch.ones_like(ids))[0]
            mine = got[r][mb["doc_ids"][r] == d]
            assert torch.allclose(mine, alone, atol=TOL), (r, d, (mine - alone).abs().max())


def test_gradients_equal_the_mask_path(models: tuple[Any, Any]) -> None:
    plain, varlen = models
    (mb,) = [collate(m, 0) for m in pack(docs(1), micro_batch_tokens=10_000, row_tokens=24)]
    grads = []
    for m in (plain, varlen):
        m.zero_grad(set_to_none=True)
        lp = packed_token_logprobs(m, mb["input_ids"], mb["position_ids"], mb["doc_ids"], chunk_tokens=16)
        (lp * mb["loss_mask"]).sum().backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert torch.allclose(grads[1][name], g, atol=TOL), name


def test_a_filler_micro_batch_scores_nothing_and_still_reaches_every_weight(models: tuple[Any, Any]) -> None:
    _, varlen = models
    mb = filler(pad_id=0)
    varlen.zero_grad(set_to_none=True)
    lp = packed_token_logprobs(varlen, mb["input_ids"], mb["position_ids"], mb["doc_ids"], chunk_tokens=16)
    assert lp.shape == mb["input_ids"].shape and not lp.any()
    lp.sum().backward()  # under FSDP every rank's backward must reach the sharded parameters
    assert all(p.grad is not None and not p.grad.any() for p in varlen.parameters())


def test_the_varlen_attention_refuses_a_call_without_document_bounds(models: tuple[Any, Any]) -> None:
    _, varlen = models
    with pytest.raises(ValueError, match="cu_seq_lens_q"):
        varlen(input_ids=torch.tensor([[5, 6, 7]]))


def test_the_trainer_builds_the_varlen_model_when_asked(tmp_path: Path) -> None:
    from training.trainer.checkpoint import build_model

    path = create_tiny_model(ModelConfig(), tmp_path / "m", seed=0)
    built = build_model(path, "float32", torch.device("cpu"), fsdp=False, attention="varlen")
    assert built.config._attn_implementation == VARLEN
