"""Multi-digit addition with a code-checked answer: prompt "47+385=", answer "432"."""

from __future__ import annotations

import random

from training.envs.base import Environment, Parser, Rubric, Task, exact_answer, terminated


def _make(rng: random.Random, digits: int, prefix: str, count: int, exclude: set[str]) -> list[Task]:
    tasks: list[Task] = []
    seen = set(exclude)
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    while len(tasks) < count:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        prompt = f"{a}+{b}="
        if prompt in seen:
            continue
        seen.add(prompt)
        tasks.append(Task(id=f"{prefix}{len(tasks)}", prompt=prompt, answer=str(a + b)))
    return tasks


def load_environment(
    digits: int = 2,
    num_train: int = 4000,
    num_eval: int = 200,
    seed: int = 1234,
    format_weight: float = 0.0,
) -> Environment:
    if digits < 1 or digits > 6:
        raise ValueError("arithmetic: digits must be in 1..6")
    if num_train + num_eval > (9 * 10 ** (digits - 1)) ** 2:
        raise ValueError("arithmetic: not enough distinct problems for num_train + num_eval")
    rng = random.Random(seed)
    # Held-out problems are drawn first and excluded from the training split.
    eval_set = _make(rng, digits, "eval-", num_eval, set())
    train = _make(rng, digits, "add-", num_train, {t.prompt for t in eval_set})
    rubric = Rubric(funcs=[exact_answer, terminated], weights=[1.0, format_weight])
    return Environment(
        name="arithmetic", dataset=train, eval_dataset=eval_set, rubric=rubric, parser=Parser()
    )
