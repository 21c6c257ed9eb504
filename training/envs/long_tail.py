"""Repeat a letter k times: prompt "rep:b:12=", answer "bbbbbbbbbbbb". Most k are small and a few
are large, so the completions of one batch vary a lot in length: the long tail that makes waiting
for a whole batch costly (bench/bench_scheduling.py)."""

from __future__ import annotations

import random
import string

from training.envs.base import Environment, Parser, Rubric, Task, exact_answer


def length_match(completion: str, task: Task, parser: Parser) -> float:
    """Partial credit: how close the answer's length is to k (0 when unterminated)."""
    answer = parser.parse_answer(completion)
    if answer is None:
        return 0.0
    return max(0.0, 1.0 - abs(len(answer) - len(task.answer)) / len(task.answer))


def load_environment(
    short_max: int = 3,
    long_min: int = 16,
    long_max: int = 32,
    tail_prob: float = 0.1,
    num_train: int = 4000,
    num_eval: int = 200,
    seed: int = 2468,
    length_weight: float = 0.5,
) -> Environment:
    if not 1 <= short_max < long_min <= long_max <= 60:
        raise ValueError("long_tail: need 1 <= short_max < long_min <= long_max <= 60")
    if not 0.0 <= tail_prob <= 1.0:
        raise ValueError("long_tail: tail_prob must be in [0, 1]")
    rng = random.Random(seed)

    def make(prefix: str, count: int) -> list[Task]:
        out = []
        for i in range(count):
            k = rng.randint(long_min, long_max) if rng.random() < tail_prob else rng.randint(1, short_max)
            c = rng.choice(string.ascii_lowercase)
            out.append(Task(id=f"{prefix}{i}", prompt=f"rep:{c}:{k}=", answer=c * k))
        return out

    # Repeats are fine (there are few distinct short tasks); the split is by draw, not by content.
    eval_set = make("eval-", num_eval)
    train = make("rep-", num_train)
    rubric = Rubric(funcs=[exact_answer, length_match], weights=[1.0, length_weight])
    return Environment(name="long_tail", dataset=train, eval_dataset=eval_set, rubric=rubric, parser=Parser())
