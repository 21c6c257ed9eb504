"""A code environment: the user asks for the product of two numbers, the model answers with a
Python program, and the reward is 1 when that program, run in the job's sandbox
(training/sandbox.py: bubblewrap, no network, read-only root, rlimits), prints the product.

The numbers are too long to multiply in one's head, so the way to the reward is code, not recall.
Data is generated from a seed; `demonstrations()` gives chat conversations answering with a program
(`print(a*b)`, or a noisy mix of operators) for supervised fine-tuning. Select with
`env.name = "vf:vf-code-arithmetic"`.

A sandbox that cannot start raises (training.sandbox.SandboxUnavailable): verifiers then logs the
reward function's error, the job counts it (reward_fn_errors_total_<env>) and `opsctl launch`'s
check refuses the environment before the run, instead of a run of silent zeros.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
from typing import Any

import verifiers as vf
from datasets import Dataset

_FENCE = re.compile(r"```(?:python)?\n?(.*?)```", re.DOTALL)
_LOCK = threading.Lock()
_SANDBOX: Any = None


def sandbox() -> Any:
    """One sandbox per process (its slots bound the programs running at once)."""
    global _SANDBOX
    with _LOCK:
        if _SANDBOX is None:
            from training.sandbox import Limits, Sandbox

            _SANDBOX = Sandbox(Limits(wall_s=5.0, cpu_s=2, memory_mib=256), slots=4)
        return _SANDBOX


def program(completion: Any) -> str:
    """The code of the last assistant message: a fenced block if there is one, else the text (none
    when the model ended its turn at once: verifiers still scores that rollout)."""
    if not completion:
        return ""
    last = completion[-1]
    text = str((last["content"] if isinstance(last, dict) else last.content) or "")
    fenced = _FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip() + "\n"


async def prints_the_product(completion: Any, answer: str, **_: Any) -> float:
    code = program(completion)
    if not code.strip():
        return 0.0
    result = await asyncio.to_thread(sandbox().run, code)
    return 1.0 if result.ok and result.stdout.strip() == answer else 0.0


def _pairs(digits: int, count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    lo, hi = 10 ** (digits - 1), 10**digits - 1
    return [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(count)]


def question(a: int, b: int) -> str:
    return f"product of {a} and {b}?"


def _rows(pairs: list[tuple[int, int]]) -> Dataset:
    return Dataset.from_list([{"prompt": [{"role": "user", "content": question(a, b)}], "answer": str(a * b),
                               "info": {}} for a, b in pairs])


def load_environment(digits: int = 3, num_train: int = 400, num_eval: int = 64, seed: int = 5
                     ) -> vf.Environment:
    if not 1 <= digits <= 9:
        raise ValueError("vf-code-arithmetic: digits must be in 1..9")
    pairs = _pairs(digits, num_train + num_eval, seed)
    return vf.SingleTurnEnv(dataset=_rows(pairs[:num_train]), eval_dataset=_rows(pairs[num_train:]),
                            rubric=vf.Rubric(funcs=[prints_the_product]))


def demonstrations(count: int, digits: int = 3, seed: int = 11, operators: str = "*") -> list[dict[str, Any]]:
    """Chat conversations answering with a program `print(a<op>b)`, the operator drawn from
    `operators` for each one: "*" gives only correct programs; a mix gives noisy demonstrations
    (the shipped file: "*+-%"), from which SFT learns the program's form and copying but not which
    operator answers the question, a choice that only the reward teaches."""
    rng = random.Random(seed + 1)
    return [{"messages": [{"role": "user", "content": question(a, b)},
                          {"role": "assistant", "content": f"print({a}{rng.choice(operators)}{b})"}]}
            for a, b in _pairs(digits, count, seed)]
