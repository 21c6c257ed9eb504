"""The running batch's KV cache for the built-in engine: decode feeds one token per sequence.

Rows are sequences, left-padded to a common width. The cache holds the keys and values of every
token of a row except its last one, which the next decode step feeds, so every step is one
forward over one token per row. A sequence joining the batch is prefilled (its tokens but the
last) and merged in; a finished one is dropped; leading columns that are padding in every row are
trimmed. Weights changing under the cache invalidates it: the engine re-prefills every sequence
with the new weights, so each token's log-prob is exactly the one its policy version gives, as
when every step recomputed the whole prefix.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache

Key = int  # id() of the engine's Sequence: rows are matched to sequences by identity


def cache_kwarg(model: Any) -> str:
    """transformers renamed the forward's past_key_values to cache (5.x; the old name goes in 5.40)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def supports_kv_cache(model: Any) -> bool:
    """Plain full-attention layers only: sliding-window layers keep a window, not every token."""
    layers = DynamicCache(config=model.config).layers
    return bool(layers) and not any(getattr(layer, "is_sliding", False) for layer in layers)


def layer_kv(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys and values per layer, each [rows, kv_heads, width, head_dim]."""
    return [(k, v) for k, v, *_ in cache]


@dataclass
class KVBatch:
    model: Any
    pad_id: int
    device: str | torch.device = "cpu"
    rows: list[Key] = field(default_factory=list)
    pads: list[int] = field(default_factory=list)  # leading padding columns per row
    cache: DynamicCache | None = None

    def _kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        assert self.cache is not None
        return layer_kv(self.cache)

    def _set(self, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.cache = DynamicCache(ddp_cache_data=kv, config=self.model.config)

    @property
    def width(self) -> int:
        return 0 if self.cache is None else int(self.cache.get_seq_length())

    def clear(self) -> None:
        self.rows, self.pads, self.cache = [], [], None

    def keep(self, keys: list[Key]) -> None:
        """Drop the rows of sequences no longer running, then all-padding leading columns."""
        wanted = set(keys)
        idx = [i for i, k in enumerate(self.rows) if k in wanted]
        if len(idx) == len(self.rows):
            return
        if not idx:
            self.clear()
            return
        sel = torch.tensor(idx, device=self.device)
        kv = [(k.index_select(0, sel), v.index_select(0, sel)) for k, v in self._kv()]
        self.rows = [self.rows[i] for i in idx]
        self.pads = [self.pads[i] for i in idx]
        cut = min(self.pads)
        if cut:
            kv = [(k[:, :, cut:], v[:, :, cut:]) for k, v in kv]
            self.pads = [p - cut for p in self.pads]
        self._set(kv)

    def add(self, keys: list[Key], prefixes: list[list[int]]) -> None:
        """Prefill new rows with their tokens but the last and merge them into the batch."""
        width = max(len(p) for p in prefixes)
        new: list[tuple[torch.Tensor, torch.Tensor]]
        if width == 0:  # one-token prompts: nothing to cache yet
            cfg = self.model.config
            heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
            dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
            dtype = next(self.model.parameters()).dtype
            empty = torch.zeros(len(keys), heads, 0, dim, dtype=dtype, device=self.device)
            new = [(empty, empty) for _ in range(cfg.num_hidden_layers)]
        else:
            ids = torch.full((len(prefixes), width), self.pad_id, dtype=torch.long)
            attn = torch.zeros((len(prefixes), width), dtype=torch.long)
            for i, p in enumerate(prefixes):
                if p:
                    ids[i, width - len(p) :] = torch.tensor(p)
                    attn[i, width - len(p) :] = 1
            # A row with no prefix attends to nothing (NaN); give it a pad token to attend to. Its
            # column is masked for every later query.
            attn[attn.sum(-1) == 0, -1] = 1
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            cache = DynamicCache(config=self.model.config)
            self.model(
                input_ids=ids.to(self.device),
                attention_mask=attn.to(self.device),
                position_ids=pos.to(self.device),
                use_cache=True,
                logits_to_keep=1,
                **{cache_kwarg(self.model): cache},
            )
            new = layer_kv(cache)
        new_pads = [width - len(p) for p in prefixes]
        if self.cache is None:
            self.rows, self.pads = list(keys), new_pads
            self._set(new)
            return
        old, grow_old, grow_new = self._kv(), max(0, width - self.width), max(0, self.width - width)

        def lpad(t: torch.Tensor, n: int) -> torch.Tensor:
            return torch.nn.functional.pad(t, (0, 0, n, 0)) if n else t

        kv = [
            (
                torch.cat([lpad(ok, grow_old), lpad(nk, grow_new)]),
                torch.cat([lpad(ov, grow_old), lpad(nv, grow_new)]),
            )
            for (ok, ov), (nk, nv) in zip(old, new, strict=True)
        ]
        self.pads = [p + grow_old for p in self.pads] + [p + grow_new for p in new_pads]
        self.rows = self.rows + list(keys)
        self._set(kv)

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        """One forward of each row's last token over the cache; returns next-token logits [B, V]
        and leaves the fed tokens in the cache."""
        assert self.cache is not None and len(last_tokens) == len(self.rows)
        width = self.width
        attn = torch.ones((len(self.rows), width + 1), dtype=torch.long)
        for i, p in enumerate(self.pads):
            attn[i, :p] = 0
        pos = torch.tensor([[width - p] for p in self.pads])
        out = self.model(
            input_ids=torch.tensor([[t] for t in last_tokens], device=self.device),
            attention_mask=attn.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=True,
            **{cache_kwarg(self.model): self.cache},
        )
        return out.logits[:, -1].float().cpu()
