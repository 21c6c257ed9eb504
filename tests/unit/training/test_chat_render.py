"""Chat rendering for SFT (training/chat.py): the loss mask covers exactly the assistant turns' tokens,
templates that rewrite earlier turns are split per turn, and bad datasets fail with the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.chat import ChatDataError, Conversation, load_dataset, load_jsonl, render
from training.model import build_char_tokenizer
from training.trainer.sft import chat_samples, rank_micro_batches, step_indices

DATASET = Path(__file__).parents[2] / "fixtures" / "chat" / "arith-chat.jsonl"

TOOL_CHAT = Conversation([
    {"role": "system", "content": "reply with the number."},
    {"role": "user", "content": "what is 17*6?"},
    {"role": "assistant", "content": "calc 17*6"},
    {"role": "tool", "content": "102"},
    {"role": "assistant", "content": "102"},
])


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return build_char_tokenizer()


def trained_text(tok, ids: list[int], mask: list[int]) -> str:  # type: ignore[no-untyped-def]
    return "".join(tok.convert_ids_to_tokens([i for i, m in zip(ids, mask, strict=True) if m]))


def test_mask_is_exactly_the_assistant_turns(tok) -> None:  # type: ignore[no-untyped-def]
    (sample,) = render(tok, TOOL_CHAT)
    assert sample.turns == 2
    # each assistant turn: its content, the newline and <eos>; never the "a: " generation prompt,
    # the system, user or tool text
    assert trained_text(tok, sample.input_ids, sample.loss_mask) == "calc 17*6\n<eos>102\n<eos>"
    text = "".join(tok.convert_ids_to_tokens(sample.input_ids))
    assert text == "s: reply with the number.\nu: what is 17*6?\na: calc 17*6\n<eos>t: 102\na: 102\n<eos>"
    untrained = "".join(tok.convert_ids_to_tokens([i for i, m in zip(sample.input_ids, sample.loss_mask,
                                                                      strict=True) if not m]))
    assert untrained == "s: reply with the number.\nu: what is 17*6?\na: t: 102\na: "


def test_rendering_equals_the_tokenizers_own_template(tok) -> None:  # type: ignore[no-untyped-def]
    (sample,) = render(tok, TOOL_CHAT)
    assert sample.input_ids == tok.apply_chat_template(TOOL_CHAT.messages, tokenize=True, return_dict=False)


def test_template_that_rewrites_earlier_turns_is_split_per_turn(tok) -> None:  # type: ignore[no-untyped-def]
    # Like reasoning templates that drop an earlier turn's thinking: the last assistant turn is
    # rendered in full, the earlier ones shortened, so no rendering is a prefix of the next.
    tok = build_char_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'][0] }}: "
        "{% if m['role'] == 'assistant' and not loop.last %}{{ m['content'][:1] }}\n"
        "{% else %}{{ m['content'] }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}a: {% endif %}"
    )
    conv = Conversation([{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "22"},
                         {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "44"}])
    first, second = render(tok, conv)
    assert trained_text(tok, first.input_ids, first.loss_mask) == "22\n"
    assert trained_text(tok, second.input_ids, second.loss_mask) == "44\n"
    # the second sample's context is the template's own rendering at that turn: "2" for turn one
    assert "".join(tok.convert_ids_to_tokens(second.input_ids)) == "u: 1+1?\na: 2\nu: 2+2?\na: 44\n"


def test_no_template_or_no_assistant_is_refused(tok) -> None:  # type: ignore[no-untyped-def]
    bare = build_char_tokenizer()
    bare.chat_template = None
    with pytest.raises(ChatDataError, match="no chat template"):
        render(bare, TOOL_CHAT)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ('{"text": "hi"}', "needs 'messages'"),
        ('{"messages": []}', "non-empty list"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "needs a role"),
        ('{"messages": [{"role": "user", "content": "x"}]}', "no assistant message"),
    ],
)
def test_bad_records_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    path = tmp_path / "d.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ChatDataError, match=rf"d\.jsonl:2: .*{message}"):
        load_jsonl(path)


def test_missing_or_unknown_dataset(tmp_path: Path) -> None:
    with pytest.raises(ChatDataError, match="No such file"):
        load_dataset(tmp_path / "absent.jsonl")
    with pytest.raises(ChatDataError, match=r"JSONL .* or Parquet"):
        load_dataset(tmp_path / "data.csv")


def test_parquet_with_the_same_columns_reads_the_same(tmp_path: Path, tok) -> None:  # type: ignore[no-untyped-def]
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [json.loads(line) for line in DATASET.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "chat.parquet")
    assert load_dataset(tmp_path / "chat.parquet") == load_dataset(DATASET)
    pq.write_table(pa.Table.from_pylist([{"text": "no messages"}]), tmp_path / "bad.parquet")
    with pytest.raises(ChatDataError, match=r"bad\.parquet: row 0: a record needs 'messages'"):
        load_dataset(tmp_path / "bad.parquet")


def test_shipped_dataset_batches_are_dealt_whole_and_deterministic(tok) -> None:  # type: ignore[no-untyped-def]
    from training.config import JobConfig

    samples = chat_samples(DATASET, tok)
    assert len(samples) == 96  # the tiny template is prefix-consistent: one sample per conversation
    # every trained token is an assistant turn's: the mask never covers a role prefix
    for s in samples:
        assert "u: " not in trained_text(tok, s.input_ids, s.loss_mask)
    n = len(samples)
    # a resumed run draws the same conversations for the same step; one epoch covers every one once
    assert step_indices(n, 5, 16, 0) == step_indices(n, 5, 16, 0)
    assert sorted(i for s in range(6) for i in step_indices(n, s, 16, 0)) == list(range(n))
    cfg = JobConfig()
    cfg.sft.micro_batch_tokens, cfg.sft.pack_row_tokens = 256, 128
    batch = [samples[i] for i in step_indices(n, 0, 16, 0)]
    dealt = [rank_micro_batches(batch, cfg, r, 2, tok.pad_token_id) for r in range(2)]
    assert len(dealt[0][0]) == len(dealt[1][0])  # equal micro-batch counts: no rank waits forever
    assert dealt[0][1] == dealt[1][1] == sum(sum(s.loss_mask) for s in batch)
    assert sum(int(mb["loss_mask"].sum()) for mbs, _ in dealt for mb in mbs) == dealt[0][1]


def test_the_text_vocabulary_renders_a_tool_call_as_the_server_parses_and_serialises_it() -> None:
    from training.inference.chat_api import parse_hermes
    from training.tokens import CHARS, TEXT_CHARS

    text = build_char_tokenizer("text")
    assert TEXT_CHARS[: len(CHARS)] == CHARS  # an "arith" token keeps its id
    sampled = '<tool_call>{"name": "add", "arguments": {"a": 17, "b": 6}}</tool_call>\n'
    (call,) = parse_hermes(sampled, [{"type": "function", "function": {"name": "add"}}]) or []
    question = [{"role": "user", "content": "17+6=?"}]
    prompt = text.apply_chat_template(question, tokenize=False, add_generation_prompt=True)
    after = [*question, {"role": "assistant", "content": None, "tool_calls": [call.openai()]},
             {"role": "tool", "content": "23"}]
    again = text.apply_chat_template(after, tokenize=False, add_generation_prompt=True)
    # The next turn's prompt extends the first prompt and exactly what the model sampled.
    assert again == prompt + sampled + "<eos>t: 23\na: "
    assert "<unk>" not in text.decode(text.encode(again + "a system prompt's blank line:\n\n"))
