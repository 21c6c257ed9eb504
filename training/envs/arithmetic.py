"""Multi-digit addition with a code-checked answer: prompt "47+385=", answer "432"."""

from __future__ import annotations

import random

from training.envs.base import Environment, Parser, Rubric, Task, exact_answer, terminated


def canonical(a: int, b: int) -> tuple[int, int]:
    """The unordered pair behind a problem: a+b and its commuted twin b+a share one answer."""
    return (a, b) if a <= b else (b, a)


def pair_of(task: Task) -> tuple[int, int]:
    a, b = task.prompt.rstrip("=").split("+")
    return canonical(int(a), int(b))


def _make(
    rng: random.Random, digits: int, prefix: str, count: int, exclude: set[tuple[int, int]], by_pair: bool
) -> list[Task]:
    """`count` distinct problems none of whose unordered pairs is in `exclude`; with `by_pair`,
    distinct as unordered pairs too (no problem and its twin in the same list)."""
    tasks: list[Task] = []
    seen: set[object] = set()
    lo, hi = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    while len(tasks) < count:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        pair = canonical(a, b)
        key = pair if by_pair else (a, b)
        if pair in exclude or key in seen:
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
    n = 10 if digits == 1 else 9 * 10 ** (digits - 1)  # operands per side
    # Each held-out pair removes at most two ordered problems (a+b and b+a) from training.
    if num_eval > n * (n + 1) // 2 or num_train + 2 * num_eval > n * n:
        raise ValueError("arithmetic: not enough distinct problems for num_train + num_eval")
    rng = random.Random(seed)
    # Held-out problems are drawn first; the training split excludes them by unordered pair, so no
    # commuted twin of an eval problem (b+a for a+b) leaks into training.
    eval_set = _make(rng, digits, "eval-", num_eval, set(), by_pair=True)
    held_out = {pair_of(t) for t in eval_set}
    train = _make(rng, digits, "add-", num_train, held_out, by_pair=False)
    rubric = Rubric(funcs=[exact_answer, terminated], weights=[1.0, format_weight])
    return Environment(
        name="arithmetic",
        dataset=train,
        eval_dataset=eval_set,
        rubric=rubric,
        parser=Parser(),
        stop_sequences=("\n",),
    )
