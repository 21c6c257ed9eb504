"""The verifiers-style contract: load_environment(**kwargs) -> Environment(dataset, rubric, parser)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    answer: str


class Parser:
    """Extracts the answer from a completion: the text up to the end-of-answer marker, stripped."""

    def __init__(self, stop: str = "\n") -> None:
        self.stop = stop

    def parse_answer(self, completion: str) -> str | None:
        if self.stop not in completion:
            return None  # unterminated: ran out of tokens
        answer = completion.split(self.stop, 1)[0].strip()
        return answer or None


RewardFunc = Callable[[str, Task, Parser], float]


@dataclass
class Rubric:
    funcs: list[RewardFunc]
    weights: list[float]

    def __post_init__(self) -> None:
        if len(self.funcs) != len(self.weights):
            raise ValueError("rubric: one weight per reward function")

    def score(self, completion: str, task: Task, parser: Parser) -> tuple[float, dict[str, float]]:
        parts = {f.__name__: float(f(completion, task, parser)) for f in self.funcs}
        total = sum(w * parts[f.__name__] for f, w in zip(self.funcs, self.weights, strict=True))
        return total, parts


@dataclass
class Environment:
    name: str
    dataset: Sequence[Task]
    eval_dataset: Sequence[Task]
    rubric: Rubric
    parser: Parser = field(default_factory=Parser)

    def demonstration(self, task: Task) -> str:
        """The SFT target for a task: the answer then the end-of-answer marker."""
        return task.answer + self.parser.stop


def exact_answer(completion: str, task: Task, parser: Parser) -> float:
    return 1.0 if parser.parse_answer(completion) == task.answer else 0.0


def terminated(completion: str, task: Task, parser: Parser) -> float:
    return 1.0 if parser.parse_answer(completion) is not None else 0.0
