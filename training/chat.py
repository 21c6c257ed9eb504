"""Chat conversations as training tokens: the model's own chat template, loss on assistant turns only.

One implementation for every place that trains on messages (SFT on chat datasets; multi-turn
environment rollouts). A conversation is rendered with the tokenizer's chat template and tokenized
once; each assistant turn's characters are found by rendering the conversation up to that turn
(with the generation prompt, which stays untrained) and through it, and the tokens whose text
starts inside those spans are the ones trained.

That works only when rendering is prefix-consistent: the rendering up to a turn must be the start
of the rendering of the whole conversation. Some templates rewrite earlier turns (dropping an old
turn's reasoning, for one), so the conversation is then split: one sample per assistant turn, each
with the context exactly as the template renders it at that turn.

Datasets: JSONL, one conversation per line: {"messages": [{"role": ..., "content": ...}, ...]} with
optional "tools" (passed to the template); or Parquet with the same columns (read with pyarrow, of
the training extra). Torch-free: `opsctl launch` validates datasets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool"})


class ChatDataError(ValueError):
    """A dataset record or conversation that cannot be trained on; the message names where."""


@dataclass
class Conversation:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


@dataclass
class ChatTokens:
    """One training sample: token ids and a 0/1 loss mask of the same length."""

    input_ids: list[int]
    loss_mask: list[int]
    turns: int = 1  # assistant turns it trains
    spans: list[tuple[int, int]] = field(default_factory=list)  # trained character spans (debugging)


def check_conversation(conv: Conversation, where: str) -> None:
    msgs = conv.messages
    if not isinstance(msgs, list) or not msgs:
        raise ChatDataError(f"{where}: 'messages' must be a non-empty list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ChatDataError(f"{where}: message {i} needs a role among {sorted(ROLES)}")
        if not isinstance(m.get("content", ""), str) and "tool_calls" not in m:
            raise ChatDataError(f"{where}: message {i} content must be a string")
    if not any(m["role"] == "assistant" for m in msgs):
        raise ChatDataError(f"{where}: no assistant message, nothing to train")


def load_dataset(path: str | Path) -> list[Conversation]:
    """Every conversation of a JSONL or Parquet file, checked; errors name the file and record."""
    p = Path(path)
    if p.suffix == ".parquet":
        return load_parquet(p)
    if p.suffix not in (".jsonl", ".json"):
        raise ChatDataError(f"{p}: chat datasets are JSONL (one {{'messages': [...]}} per line) or Parquet")
    return load_jsonl(p)


def _conversation(rec: Any, where: str) -> Conversation:
    if not isinstance(rec, dict) or "messages" not in rec:
        raise ChatDataError(f"{where}: a record needs 'messages'")
    conv = Conversation(rec["messages"], rec.get("tools"))
    check_conversation(conv, where)
    return conv


def _drop_nulls(m: Any) -> Any:
    return {k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m


def load_parquet(p: Path) -> list[Conversation]:
    """A Parquet file's rows as conversations ('messages' a list of structs; keys a row lacks read
    as null, so they are dropped)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ChatDataError(f"{p}: reading Parquet needs pyarrow (the training extra)") from None
    try:
        rows = pq.read_table(p).to_pylist()
    except (OSError, ValueError) as exc:
        raise ChatDataError(f"{p}: not a readable Parquet file ({exc})") from None
    out = []
    for n, row in enumerate(rows):
        msgs = row.get("messages") if isinstance(row, dict) else None
        if isinstance(msgs, list):
            row = {**row, "messages": [_drop_nulls(m) for m in msgs]}
        out.append(_conversation(row, f"{p}: row {n}"))
    if not out:
        raise ChatDataError(f"{p}: no conversations")
    return out


def load_jsonl(path: str | Path) -> list[Conversation]:
    """Every conversation of a JSONL file, checked; errors name the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ChatDataError(f"{p}: {exc.strerror or exc}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ChatDataError(f"{where}: not JSON ({exc.msg})") from None
        out.append(_conversation(rec, where))
    if not out:
        raise ChatDataError(f"{p}: no conversations")
    return out


def _render(tokenizer: Any, msgs: list[dict[str, Any]], tools: Any, generation_prompt: bool,
            **template_kwargs: Any) -> str:
    text: str = tokenizer.apply_chat_template(
        msgs, tools=tools, tokenize=False, add_generation_prompt=generation_prompt, **template_kwargs
    )
    return text


def prompt_ids(
    tokenizer: Any, msgs: list[dict[str, Any]], tools: Any = None, **template_kwargs: Any
) -> list[int]:
    """A conversation so far as the prompt of the next assistant turn: rendered as training renders
    it (generation prompt added), tokenized without special tokens (the template places them)."""
    return list(tokenizer.encode(_render(tokenizer, msgs, tools, True, **template_kwargs),
                                 add_special_tokens=False))


def assistant_spans(tokenizer: Any, conv: Conversation) -> tuple[str, list[tuple[int, int]]] | None:
    """The whole conversation's text and the character span of each assistant turn in it, or None
    when the template is not prefix-consistent (an earlier rendering is not a prefix of the next)."""
    msgs, spans = conv.messages, []
    full = _render(tokenizer, msgs, conv.tools, False)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = _render(tokenizer, msgs[:i], conv.tools, True) if i else ""
        through = _render(tokenizer, msgs[: i + 1], conv.tools, False)
        if not (through.startswith(before) and full.startswith(through)):
            return None
        spans.append((len(before), len(through)))
    return full, spans


def _tokenize(tokenizer: Any, text: str, spans: list[tuple[int, int]]) -> ChatTokens:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, mask = list(enc["input_ids"]), []
    for start, _end in enc["offset_mapping"]:
        mask.append(int(any(a <= start < b for a, b in spans)))
    return ChatTokens(ids, mask, turns=len(spans), spans=list(spans))


def render(tokenizer: Any, conv: Conversation) -> list[ChatTokens]:
    """Training samples of one conversation: one when the template is prefix-consistent, else one
    per assistant turn. Raises ChatDataError for a tokenizer without a chat template or without
    character offsets (a slow tokenizer), which would make the mask guesswork."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatDataError("the tokenizer has no chat template")
    if not getattr(tokenizer, "is_fast", False):
        raise ChatDataError("assistant-only masks need a fast tokenizer (character offsets)")
    found = assistant_spans(tokenizer, conv)
    if found is not None:
        text, spans = found
        return [_tokenize(tokenizer, text, spans)]
    out = []
    for i, m in enumerate(conv.messages):
        if m["role"] == "assistant":
            before = _render(tokenizer, conv.messages[:i], conv.tools, True) if i else ""
            through = _render(tokenizer, conv.messages[: i + 1], conv.tools, False)
            if not through.startswith(before):
                raise ChatDataError(f"assistant turn {i}: the template's generation prompt is not a prefix "
                                    "of the rendered turn")
            out.append(_tokenize(tokenizer, through, [(len(before), len(through))]))
    return out
