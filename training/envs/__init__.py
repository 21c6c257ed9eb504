"""Environments selectable by name from config (`env.name`, `env.kwargs`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from training.envs import arithmetic, long_tail, reverse_text
from training.envs.base import Environment, Parser, Rubric, Task, prompt_ids

REGISTRY: dict[str, Callable[..., Environment]] = {
    "arithmetic": arithmetic.load_environment,
    "reverse_text": reverse_text.load_environment,
    "long_tail": long_tail.load_environment,
}


def load_environment(name: str, **kwargs: Any) -> Environment:
    """Build a registered environment; a bad name or argument is a ValueError naming it."""
    try:
        factory = REGISTRY[name]
    except KeyError:
        raise ValueError(f"env.name: unknown environment {name!r} (known: {sorted(REGISTRY)})") from None
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ValueError(f"env.kwargs: {exc}") from None


__all__ = ["REGISTRY", "Environment", "Parser", "Rubric", "Task", "load_environment", "prompt_ids"]
