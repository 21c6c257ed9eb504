"""Log-probabilities computed in chunks of positions (training/model.py): equal to the full
computation, values and gradients, with lower peak tensor memory, measured with torch's profiler
memory accounting at sizes where the logits dominate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.config import load_config
from training.model import (
    _selected_logprobs,
    chunked_logprobs,
    create_tiny_model,
    load_model,
    packed_token_logprobs,
    token_logprobs,
)
from training.profiling import peak_tensor_bytes


@pytest.mark.parametrize("arch", ["qwen3", "glm4_moe"])
def test_chunked_equals_full_in_values_and_gradients(tmp_path: Path, arch: str) -> None:
    cfg = load_config(None, [f"model.arch={arch}"])
    model = load_model(create_tiny_model(cfg.model, tmp_path / arch, seed=1))
    torch.manual_seed(0)
    ids = torch.randint(4, 40, (3, 19))
    doc_ids = torch.tensor([[0] * 7 + [1] * 12, [0] * 19, [0] * 10 + [-1] * 9])
    position_ids = torch.stack([torch.cat([torch.arange(7), torch.arange(12)]), torch.arange(19),
                                torch.cat([torch.arange(10), torch.zeros(9, dtype=torch.long)])])
    results = []
    for chunk in (0, 5):
        model.zero_grad()
        packed = packed_token_logprobs(model, ids, position_ids, doc_ids, 0.7, chunk_tokens=chunk)
        plain = token_logprobs(model, ids, torch.ones_like(ids), 1.0, chunk_tokens=chunk)
        (packed.sum() + plain.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((packed.detach(), plain.detach(), grads))
    (full_p, full_t, full_g), (ch_p, ch_t, ch_g) = results
    assert torch.allclose(full_p, ch_p, atol=1e-5) and torch.allclose(full_t, ch_t, atol=1e-5)
    assert full_g.keys() == ch_g.keys() and full_g
    for name, g in full_g.items():
        assert torch.allclose(g, ch_g[name], atol=1e-5), name
    assert type(model.get_output_embeddings()).forward is model.get_output_embeddings().forward.__func__


def test_chunks_lower_the_peak_tensor_memory_of_forward_and_backward() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(64, 8000, bias=False)
    hidden = torch.randn(4, 512, 64, requires_grad=True)
    targets = torch.randint(0, 8000, (4, 512))

    def full() -> None:
        _selected_logprobs(head(hidden), targets, 1.0).sum().backward()

    def chunked() -> None:
        chunked_logprobs(hidden, head, targets, 1.0, 256).sum().backward()

    full_peak, chunked_peak = peak_tensor_bytes(full), peak_tensor_bytes(chunked)
    logits = 4 * 512 * 8000 * 4  # one float32 copy of the full logits: 65.5 MB
    print(f"peak tensor memory: full {full_peak / 2**20:.1f} MiB, "
          f"chunks of 256 {chunked_peak / 2**20:.1f} MiB")
    # full: logits, their exponentials and gradients at once (3.9 copies measured); chunks: a few
    # chunk-sized temporaries (0.6 of one full copy measured)
    assert full_peak >= 2 * logits
    assert chunked_peak < logits and 4 * chunked_peak < full_peak
