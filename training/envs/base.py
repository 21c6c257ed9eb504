"""The verifiers-style contract: load_environment(**kwargs) -> Environment(dataset, rubric, parser)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


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
    # Strings that end a completion, sent as the OpenAI `stop` list with every request. The
    # parser's end-of-answer marker must be among them, or answers would run on to max_tokens.
    stop_sequences: tuple[str, ...] = ("\n",)

    def __post_init__(self) -> None:
        if not self.stop_sequences or any(not s for s in self.stop_sequences):
            raise ValueError(f"{self.name}: stop_sequences must be non-empty strings")
        if self.parser.stop not in self.stop_sequences:
            raise ValueError(f"{self.name}: parser end marker {self.parser.stop!r} is not a stop string")

    def demonstration(self, task: Task) -> str:
        """The SFT target for a task: the answer then the end-of-answer marker."""
        return task.answer + self.parser.stop


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """Token ids of a prompt: BOS first when the tokenizer has one (Qwen's has none), then the text."""
    ids = list(tokenizer.encode(prompt, add_special_tokens=False))
    bos = getattr(tokenizer, "bos_token_id", None)
    return ids if bos is None else [int(bos), *ids]


def exact_answer(completion: str, task: Task, parser: Parser) -> float:
    return 1.0 if parser.parse_answer(completion) == task.answer else 0.0


def terminated(completion: str, task: Task, parser: Parser) -> float:
    return 1.0 if parser.parse_answer(completion) is not None else 0.0
