"""Multi-digit addition as a verifiers environment: the user asks "47+385=", the assistant answers
"432". The data is generated from a seed (nothing is downloaded); held-out problems are drawn
first and no commuted twin of one (b+a for a+b) is in the training split.

Select it with `env.name = "vf:vf-arithmetic"`; `env.kwargs` are load_environment's arguments.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from datasets import Dataset

SYSTEM = "Answer with the sum only."


def _problems(rng: random.Random, digits: int, count: int, exclude: set[tuple[int, int]]
              ) -> list[tuple[int, int]]:
    lo, hi = (10 ** (digits - 1) if digits > 1 else 0), 10**digits - 1
    out: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(out) < count:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        pair = (min(a, b), max(a, b))
        if pair in exclude or pair in seen:
            continue
        seen.add(pair)
        out.append((a, b))
    return out


def _dataset(problems: list[tuple[int, int]], system: bool) -> Dataset:
    rows = []
    for a, b in problems:
        prompt = [{"role": "system", "content": SYSTEM}] if system else []
        prompt.append({"role": "user", "content": f"{a}+{b}="})
        rows.append({"prompt": prompt, "answer": str(a + b), "info": {}})
    return Dataset.from_list(rows)


def exact_sum(completion: Any, answer: str, **_: Any) -> float:
    """1 when the last assistant message, stripped, is the sum."""
    text = completion[-1]["content"] if isinstance(completion[-1], dict) else completion[-1].content
    return 1.0 if str(text or "").strip() == answer else 0.0


def load_environment(digits: int = 1, num_train: int = 40, num_eval: int = 10, seed: int = 1234,
                     system_prompt: bool = False) -> vf.Environment:
    if not 1 <= digits <= 6:
        raise ValueError("vf-arithmetic: digits must be in 1..6")
    span = 10 if digits == 1 else 9 * 10 ** (digits - 1)
    if num_train + num_eval > span * (span + 1) // 2:
        raise ValueError("vf-arithmetic: not enough distinct problems for num_train + num_eval")
    rng = random.Random(seed)
    held_out = _problems(rng, digits, num_eval, set())
    train = _problems(rng, digits, num_train, {(min(a, b), max(a, b)) for a, b in held_out})
    return vf.SingleTurnEnv(dataset=_dataset(train, system_prompt),
                            eval_dataset=_dataset(held_out, system_prompt),
                            rubric=vf.Rubric(funcs=[exact_sum]))
