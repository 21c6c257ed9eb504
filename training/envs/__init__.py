"""Environments selectable by name from config (`env.name`, `env.kwargs`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training.envs import arithmetic, long_tail, reverse_text, verifiers_env
from training.envs.base import Environment, Parser, Rubric, Task, prompt_ids
from training.envs.verifiers_env import EnvLoadError, VerifiersEnvironment, is_verifiers

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


def load_any(name: str, kwargs: dict[str, Any], paths: Sequence[Path] = ()
             ) -> Environment | VerifiersEnvironment:
    """A built-in environment by name, or `vf:<env_id>` through verifiers (`paths`: directories
    searched first for its package, the run's installed environments)."""
    if is_verifiers(name):
        return verifiers_env.load(name, kwargs, paths)
    return load_environment(name, **kwargs)


__all__ = [
    "REGISTRY", "EnvLoadError", "Environment", "Parser", "Rubric", "Task", "VerifiersEnvironment",
    "load_any", "load_environment", "prompt_ids",
]
