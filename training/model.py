"""Models and tokenizers: Hugging Face causal LMs from a local directory, or a tiny random one.

Nothing is downloaded: the tiny model is built from `AutoConfig.for_model` and a character-level
tokenizer is built with the `tokenizers` library and saved beside it with `save_pretrained`.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.utils import logging as transformers_logging

from training.config import ModelConfig

transformers_logging.disable_progress_bar()
transformers_logging.set_verbosity_error()

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Everything the environments print: digits, lowercase letters, operators and the newline that
# ends an answer.
CHARS = list(string.digits + string.ascii_lowercase + "+-*=:?., \n")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )


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
        common.update(
            moe_intermediate_size=cfg.moe_intermediate_size,
            n_routed_experts=cfg.n_routed_experts,
            num_experts_per_tok=cfg.num_experts_per_tok,
            first_k_dense_replace=1,
            n_shared_experts=1,
        )
    return AutoConfig.for_model(cfg.arch, **common)


def create_tiny_model(cfg: ModelConfig, out_dir: Path, seed: int) -> Path:
    """A randomly initialised model and its tokenizer saved as a local HF checkpoint."""
    tokenizer = build_char_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(cfg, len(tokenizer), tokenizer))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_model(path: str | Path, dtype: str = "float32", device: str | torch.device = "cpu") -> Any:
    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype])
    return model.to(device)


def load_tokenizer(path: str | Path) -> Any:
    return AutoTokenizer.from_pretrained(str(path))


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of each token given its prefix; position 0 gets 0. Shape [B, T]."""
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logits = logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
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
) -> torch.Tensor:
    """`token_logprobs` for packed rows (several documents per row, see orchestrator.batch.collate):
    each document is scored as if it ran alone; its first token and padding get 0. Shape [B, T]."""
    dtype = next(model.parameters()).dtype
    mask = packed_attention_mask(doc_ids, dtype)
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).logits
    logits = logits[:, :-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    lp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    lp = torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)
    # A document's first token is predicted from the previous document: not its own log-prob.
    return lp.masked_fill(position_ids == 0, 0.0)
