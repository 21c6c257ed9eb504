"""Packed rows without a dense mask (trainer.attention = "varlen").

The mask path (model.packed_attention_mask) gives every packed row a [T, T] block-diagonal mask,
so attention memory grows with the row width squared. Here the micro-batch's real tokens are laid
end to end as one sequence, documents are delimited by cumulative lengths (`cu_seq_lens_q/k`, the
keyword arguments transformers passes to its attention functions, as flash-attention's varlen
kernels take them), and the attention registered as VARLEN runs causal attention per document:
no mask tensor exists and padding costs nothing. On a GPU the same call would suit
flash_attention_2's varlen kernel; this implementation is the portable one (CPU and GPU alike).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

VARLEN = "opsctl_varlen"


def varlen_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each document of a [1, heads, N, dim] sequence (grouped-query keys
    and values repeated to the query heads); returns [1, N, heads, dim] as transformers expects."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise ValueError(f"the {VARLEN} attention needs cu_seq_lens_q (packed_token_logprobs passes it)")
    groups = query.shape[1] // key.shape[1]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    bounds = [int(b) for b in cu.tolist()]
    parts = [
        F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True,
                                       scale=scaling)
        for a, b in itertools.pairwise(bounds)
    ]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(VARLEN, varlen_attention)


def flatten(input_ids: torch.Tensor, position_ids: torch.Tensor, doc_ids: torch.Tensor) -> dict[str, Any]:
    """The real tokens of packed rows as one sequence, with its documents' cumulative lengths. A
    micro-batch of padding only (a filler) keeps its first two tokens, so every FSDP rank still runs
    forward and backward through every parameter."""
    real = doc_ids >= 0
    if not bool(real.any()):
        real = torch.zeros_like(real)
        real[0, :2] = True
    ids, pos = input_ids[real][None], position_ids[real][None]
    starts = (pos[0] == 0).nonzero().flatten()
    if starts.numel() == 0 or int(starts[0]) != 0:
        starts = torch.cat([torch.zeros(1, dtype=starts.dtype, device=starts.device), starts])
    cu = torch.cat([starts, torch.tensor([ids.shape[1]], device=starts.device)]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return {"real": real, "input_ids": ids, "position_ids": pos, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": longest, "max_length_k": longest}
