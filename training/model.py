"""Models and tokenizers: Hugging Face causal LMs from a local directory, or a tiny random one.

Nothing is downloaded: the tiny model is built from `AutoConfig.for_model` and a character-level
tokenizer is built with the `tokenizers` library and saved beside it with `save_pretrained`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as transformers_logging

from training.config import ModelConfig
from training.tokens import SPECIAL, TEMPLATES, VOCABS
from training.varlen import VARLEN, flatten

transformers_logging.disable_progress_bar()
transformers_logging.set_verbosity_error()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_char_tokenizer(vocab_name: str = "arith") -> PreTrainedTokenizerFast:
    """The tiny models' tokenizer: one token per character of model.vocab's alphabet."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL + VOCABS[vocab_name])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # every character its own piece, newlines included ("." alone would leave "\n\n" one unknown piece)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.chat_template = TEMPLATES[vocab_name]  # chat (training/chat.py); plain prompts do not use it
    return fast


def tiny_config(cfg: ModelConfig, vocab_size: int, tokenizer: PreTrainedTokenizerFast) -> Any:
    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if cfg.arch == "glm4_moe":
        # GLM-4.5-Air's shape in small: the first layer dense, then routed experts beside one
        # shared expert, biased q/k/v projections, rotary embedding on half of each head, no q/k norm
        common.update(
            moe_intermediate_size=cfg.moe_intermediate_size,
            n_routed_experts=cfg.n_routed_experts,
            num_experts_per_tok=cfg.num_experts_per_tok,
            first_k_dense_replace=1,
            n_shared_experts=1,
            attention_bias=True,
            partial_rotary_factor=0.5,
            use_qk_norm=False,
        )
    return AutoConfig.for_model(cfg.arch, **common)


def create_tiny_model(cfg: ModelConfig, out_dir: Path, seed: int) -> Path:
    """A randomly initialised model and its tokenizer saved as a local HF checkpoint."""
    tokenizer = build_char_tokenizer(cfg.vocab)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(cfg, len(tokenizer), tokenizer))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_model(path: str | Path, dtype: str = "float32", device: str | torch.device = "cpu") -> Any:
    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype])
    return model.to(device)


def _selected_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) at `targets`, in float32, without a log-softmax copy."""
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    return _selected_logprobs(torch.nn.functional.linear(hidden, weight, bias), targets, temperature)


def chunked_logprobs(
    hidden: torch.Tensor, head: torch.nn.Linear, targets: torch.Tensor, temperature: float, chunk_tokens: int
) -> torch.Tensor:
    """The output head's log-probabilities of `targets` [B, N] from hidden states [B, N, H], computed
    chunk_tokens positions at a time: only one chunk's float32 vocabulary logits exist at once. With
    autograd each chunk is recomputed in backward (activation checkpointing), so backward holds no
    logits either; the values equal the full computation's."""
    flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    parts = []
    for start in range(0, flat_t.shape[0], chunk_tokens):
        h, t = flat_h[start : start + chunk_tokens], flat_t[start : start + chunk_tokens]
        if torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            parts.append(checkpoint(_chunk_logprobs, h, head.weight, head.bias, t, temperature,
                                    use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(h, head.weight, head.bias, t, temperature))
    return torch.cat(parts).reshape(targets.shape)


def _next_token_logprobs(
    model: Any, temperature: float, chunk_tokens: int, input_ids: torch.Tensor, **inputs: torch.Tensor
) -> torch.Tensor:
    """[B, T-1]: the log-probability of token t+1 after tokens 0..t. With chunk_tokens > 0 the model
    returns its last hidden states (the output head is bypassed for the call) and the head is applied
    in chunks, so no [B, T, vocab] logits tensor is ever made."""
    targets = input_ids[:, 1:]
    if chunk_tokens <= 0:
        logits = model(input_ids=input_ids, **inputs).logits[:, :-1]
        return _selected_logprobs(logits, targets, temperature)
    head = model.get_output_embeddings()
    head.forward = lambda h: h  # this call returns hidden states; FSDP still gathers the head's weights
    try:
        hidden = model(input_ids=input_ids, **inputs).logits[:, :-1]
    finally:
        del head.forward  # back to the class's forward
    return chunked_logprobs(hidden, head, targets, temperature, chunk_tokens)


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
    chunk_tokens: int = 0,
) -> torch.Tensor:
    """Log-probability of each token given its prefix; position 0 gets 0. Shape [B, T]."""
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    lp = _next_token_logprobs(model, temperature, chunk_tokens, input_ids, attention_mask=attention_mask,
                              position_ids=position_ids)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def packed_attention_mask(doc_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive [B, 1, T, T] mask for packed rows: block-diagonal causal, so a token attends only
    to earlier tokens of its own document. Padding (doc id -1) attends to earlier padding only,
    which keeps every softmax row non-empty (no NaN) while no real token ever sees it."""
    t = doc_ids.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=doc_ids.device).tril()
    allowed = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=doc_ids.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def packed_token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    doc_ids: torch.Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = 0,
) -> torch.Tensor:
    """`token_logprobs` for packed rows (several documents per row, see orchestrator.batch.collate):
    each document is scored as if it ran alone; its first token and padding get 0. Shape [B, T].
    A model built with the varlen attention (training/varlen.py) gets no [T, T] mask."""
    if getattr(model.config, "_attn_implementation", None) == VARLEN:
        return _varlen_token_logprobs(model, input_ids, position_ids, doc_ids, temperature, chunk_tokens)
    dtype = next(model.parameters()).dtype
    mask = packed_attention_mask(doc_ids, dtype)
    lp = _next_token_logprobs(model, temperature, chunk_tokens, input_ids, attention_mask=mask,
                              position_ids=position_ids)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    # A document's first token is predicted from the previous document: not its own log-prob.
    return lp.masked_fill(position_ids == 0, 0.0)


def _varlen_token_logprobs(
    model: Any, input_ids: torch.Tensor, position_ids: torch.Tensor, doc_ids: torch.Tensor,
    temperature: float, chunk_tokens: int,
) -> torch.Tensor:
    flat = flatten(input_ids, position_ids, doc_ids)
    real = flat.pop("real")
    lp = _next_token_logprobs(model, temperature, chunk_tokens, **flat)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1).masked_fill(flat["position_ids"] == 0, 0.0)
    scored = doc_ids[real] >= 0  # all of them, except a filler's stand-in tokens
    # back into the rows; masked_scatter keeps the graph (a filler's loss still reaches every weight)
    zeros = torch.zeros(input_ids.shape, dtype=lp.dtype, device=lp.device)
    return zeros.masked_scatter(real & (doc_ids >= 0), lp[0][scored])
