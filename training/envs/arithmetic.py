"""Multi-digit addition with a code-checked answer: prompt "47+385=", answer "432"."""

from __future__ import annotations

import random

from training.envs.base import Environment, Parser, Rubric, Task, exact_answer, terminated


def _pair(a: int, b: int) -> tuple[int, int]:
    """a+b and b+a are the same problem: the held-out split is drawn by unordered pair."""
    return (a, b) if a <= b else (b, a)


def _make(
    rng: random.Random,
    digits: int,
    prefix: str,
    count: int,
    exclude: set[tuple[int, int]],
    distinct_pairs: bool,
) -> list[Task]:
    tasks: list[Task] = []
    seen: set[tuple[int, int]] = set()
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    while len(tasks) < count:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        key = _pair(a, b) if distinct_pairs else (a, b)
        if _pair(a, b) in exclude or key in seen:
            continue
        seen.add(key)
        tasks.append(Task(id=f"{prefix}{len(tasks)}", prompt=f"{a}+{b}=", answer=str(a + b)))
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
    n = 10**digits - (10 ** (digits - 1) if digits > 1 else 0)  # operands with that many digits
    # Held-out problems are distinct unordered pairs; their 2 orders (1 for a+a) leave the rest.
    if num_eval > n * (n + 1) // 2 or num_train > n * n - 2 * num_eval:
        raise ValueError("arithmetic: not enough distinct problems for num_train + num_eval")
    rng = random.Random(seed)
    # Held-out problems are drawn first, and neither order of their operands is trained on.
    eval_set = _make(rng, digits, "eval-", num_eval, set(), distinct_pairs=True)
    held_out = {_pair(*map(int, t.prompt.rstrip("=").split("+"))) for t in eval_set}
    train = _make(rng, digits, "add-", num_train, held_out, distinct_pairs=False)
    rubric = Rubric(funcs=[exact_answer, terminated], weights=[1.0, format_weight])
    return Environment(
        name="arithmetic", dataset=train, eval_dataset=eval_set, rubric=rubric, parser=Parser()
    )
