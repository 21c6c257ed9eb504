"""Reverse a short lowercase string: prompt "rev:abcd=", answer "dcba"; partial credit by similarity."""

from __future__ import annotations

import difflib
import random
import string

from training.envs.base import Environment, Parser, Rubric, Task, exact_answer


def similarity(completion: str, task: Task, parser: Parser) -> float:
    answer = parser.parse_answer(completion)
    if answer is None:
        return 0.0
    return difflib.SequenceMatcher(a=answer, b=task.answer).ratio()


def load_environment(
    min_len: int = 3,
    max_len: int = 6,
    num_train: int = 4000,
    num_eval: int = 200,
    seed: int = 4321,
    similarity_weight: float = 0.5,
) -> Environment:
    if not 1 <= min_len <= max_len <= 32:
        raise ValueError("reverse_text: need 1 <= min_len <= max_len <= 32")
    rng = random.Random(seed)
    alphabet = string.ascii_lowercase
    seen: set[str] = set()

    def make(prefix: str, count: int) -> list[Task]:
        out: list[Task] = []
        attempts = 0
        while len(out) < count:
            attempts += 1
            if attempts > 100 * (num_train + num_eval):
                raise ValueError("reverse_text: not enough distinct strings for the requested sizes")
            word = "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))
            if word in seen:
                continue
            seen.add(word)
            out.append(Task(id=f"{prefix}{len(out)}", prompt=f"rev:{word}=", answer=word[::-1]))
        return out

    eval_set = make("eval-", num_eval)
    train = make("rev-", num_train)
    rubric = Rubric(funcs=[exact_answer, similarity], weights=[1.0, similarity_weight])
    return Environment(
        name="reverse_text",
        dataset=train,
        eval_dataset=eval_set,
        rubric=rubric,
        parser=Parser(),
        stop_sequences=("\n",),
    )
