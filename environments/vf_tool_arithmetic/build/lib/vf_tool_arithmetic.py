"""Addition of numbers too long to add in one's head, with an `add` tool: a multi-turn verifiers
ToolEnv. The user asks "4821+1307=?"; a good rollout calls add(a=4821, b=1307), reads the tool's
answer and replies with it. The reward is 1 for the exact sum as the final message.

Data is generated from a seed. `demonstrations()` gives chat conversations of that good rollout
for supervised fine-tuning (`sft.dataset`), so that a small model learns the tool-call format
before RL. Select with `env.name = "vf:vf-tool-arithmetic"`.
"""

from __future__ import annotations

import json
import random
from typing import Any

import verifiers as vf
from datasets import Dataset


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def _pairs(digits: int, count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    return [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(count)]


def _rows(pairs: list[tuple[int, int]]) -> Dataset:
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}+{b}=?"}], "answer": str(a + b),
                               "info": {}} for a, b in pairs])


def final_answer(completion: Any, answer: str, **_: Any) -> float:
    """1 when the last message is the assistant's and, stripped, the sum."""
    last = completion[-1]
    role = last["role"] if isinstance(last, dict) else last.role
    text = last["content"] if isinstance(last, dict) else last.content
    return 1.0 if role == "assistant" and str(text or "").strip() == answer else 0.0


def load_environment(digits: int = 4, num_train: int = 200, num_eval: int = 20, seed: int = 99,
                     max_turns: int = 3) -> vf.Environment:
    if not 2 <= digits <= 9:
        raise ValueError("vf-tool-arithmetic: digits must be in 2..9")
    pairs = _pairs(digits, num_train + num_eval, seed)
    return vf.ToolEnv(dataset=_rows(pairs[:num_train]), eval_dataset=_rows(pairs[num_train:]), tools=[add],
                      max_turns=max_turns, rubric=vf.Rubric(funcs=[final_answer]))


def demonstrations(count: int, digits: int = 4, seed: int = 7) -> list[dict[str, Any]]:
    """Conversations of the good rollout, in the chat dataset format (`{"messages": [...]}`), with
    the tool call's arguments serialised as the inference server does (json.dumps)."""
    out = []
    for i, (a, b) in enumerate(_pairs(digits, count, seed)):
        call = {"id": f"call-{i}", "type": "function",
                "function": {"name": "add", "arguments": json.dumps({"a": a, "b": b})}}
        out.append({"messages": [
            {"role": "user", "content": f"{a}+{b}=?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": str(a + b), "tool_call_id": f"call-{i}"},
            {"role": "assistant", "content": str(a + b)},
        ]})
    return out
