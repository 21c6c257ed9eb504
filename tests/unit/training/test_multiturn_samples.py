"""Multi-turn token bookkeeping (training/orchestrator/turns.py): only sampled tokens are trained,
environment tokens are context with log-prob 0, turns merge only on an exact prefix, the
off-policy bound applies per turn, and on a real two-turn chat against the built-in server the
trainer's recomputed log-probs of the merged sample equal the served ones."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import torch

from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model, token_logprobs
from training.orchestrator.turns import Turn, merge_turns
from training.tokenizer import load_tokenizer

# The bound the issue states (measured here: 0.0, one merged sample; float32, the engine's KV cache
# against the trainer's full forward).
ATOL = 1e-5


def test_the_mask_covers_exactly_the_sampled_tokens() -> None:
    first = Turn([1, 2, 3], [4, 5], [-1.0, -2.0], version=3)
    second = Turn([1, 2, 3, 4, 5, 9, 9], [6], [-3.0], version=4)  # 9, 9: a tool's reply
    (sample,) = merge_turns([first, second])
    assert sample.input_ids == [1, 2, 3, 4, 5, 9, 9, 6]
    assert sample.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert sample.logprobs == [0.0, 0.0, 0.0, -1.0, -2.0, 0.0, 0.0, -3.0]
    assert sample.versions == [-1, -1, -1, 3, 3, -1, -1, 4] and sample.turns == 2


def test_a_turn_whose_prompt_does_not_extend_the_last_starts_a_new_sample() -> None:
    first = Turn([1, 2, 3], [4, 5], [-1.0, -2.0], version=0)
    # the template re-rendered the first completion differently (4, 7 instead of 4, 5)
    second = Turn([1, 2, 3, 4, 7, 9], [6], [-3.0], version=0)
    a, b = merge_turns([first, second])
    assert (a.input_ids, a.loss_mask) == ([1, 2, 3, 4, 5], [0, 0, 0, 1, 1])
    assert (b.input_ids, b.loss_mask) == ([1, 2, 3, 4, 7, 9, 6], [0, 0, 0, 0, 0, 0, 1])


def test_the_off_policy_bound_applies_per_turn() -> None:
    old = Turn([1], [2, 3], [-1.0, -1.0], version=3)
    new = Turn([1, 2, 3, 8], [4], [-1.0], version=5)
    (sample,) = merge_turns([old, new], step=6, max_off_policy_steps=2)
    assert sample.loss_mask == [0, 0, 0, 0, 1]  # version 3 is 3 behind step 6: context only
    assert sample.versions == [-1, 3, 3, -1, 5]


def chat(srv: InferenceServer, messages: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": 4, "seed": seed, "logprobs": True, "return_token_ids": True}
    url = f"http://127.0.0.1:{srv.port}/v1/chat/completions"
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out


def test_a_two_turn_chat_merges_and_the_trainer_reproduces_its_logprobs(tiny_model_dir: Path) -> None:
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir)
    srv = InferenceServer(Engine(model, tok.pad_token_id, set(), 16), tok, "tiny")  # length stops only
    srv.start()
    try:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "what is 2+3?"}]
        one = chat(srv, msgs, seed=1)
        reply = one["choices"][0]
        # The next turn's messages as an environment builds them: the assistant's text, a tool reply.
        msgs += [reply["message"], {"role": "tool", "content": "5"}]
        two = chat(srv, msgs, seed=2)
    finally:
        srv.shutdown()
    turns = [Turn(r["prompt_token_ids"], r["choices"][0]["token_ids"],
                  [e["logprob"] for e in r["choices"][0]["logprobs"]["content"]], version=0)
             for r in (one, two)]
    samples = merge_turns(turns)
    # The character tokenizer re-renders the assistant's text to the same ids unless a special token
    # was sampled (decoded away): then the turns split. Either way each sampled token is trained once.
    assert sum(sum(s.loss_mask) for s in samples) == sum(len(t.completion_ids) for t in turns)
    worst = 0.0
    for s in samples:
        ids = torch.tensor([s.input_ids])
        with torch.no_grad():
            lp = token_logprobs(model, ids, torch.ones_like(ids))[0]
        mask = torch.tensor(s.loss_mask, dtype=torch.bool)
        worst = max(worst, float((lp[mask] - torch.tensor(s.logprobs)[mask]).abs().max()))
    assert worst < ATOL, worst
