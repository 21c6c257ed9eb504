"""The long-tail environment: mostly short answers, a few long ones; rewards checked by code."""

from __future__ import annotations

import pytest

from training.config import ConfigError, load_config
from training.envs import REGISTRY, load_environment


def test_lengths_have_a_long_tail() -> None:
    env = load_environment("long_tail", num_train=2000, num_eval=10)
    lengths = sorted(len(t.answer) for t in env.dataset)
    assert "long_tail" in REGISTRY and len(env.eval_dataset) == 10
    assert lengths[len(lengths) // 2] <= 3 and lengths[-1] >= 16  # median short, maximum long
    assert 0.05 < sum(n >= 16 for n in lengths) / len(lengths) < 0.15
    t = env.dataset[0]
    assert t.prompt == f"rep:{t.answer[0]}:{len(t.answer)}=" and set(t.answer) == {t.answer[0]}


def test_rewards() -> None:
    env = load_environment("long_tail", num_train=200, num_eval=1)
    t = next(t for t in env.dataset if len(t.answer) >= 16)
    score = lambda text: env.rubric.score(text, t, env.parser)[0]  # noqa: E731
    assert score(t.answer + "\n") == 1.5
    assert score(t.answer * 3 + "\n") == 0.0  # exact miss and length off by 2k
    assert score(t.answer) == 0.0  # unterminated
    assert 0 < score(t.answer + t.answer[0] + "\n") < 0.5  # off by one: partial credit


def test_bad_arguments_and_scheduling_config() -> None:
    with pytest.raises(ValueError, match="long_tail"):
        load_environment("long_tail", short_max=20, long_min=16)
    assert load_config(overrides=["orchestrator.scheduling=batch"]).orchestrator.scheduling == "batch"
    with pytest.raises(ConfigError, match=r"orchestrator\.scheduling"):
        load_config(overrides=["orchestrator.scheduling=eager"])
    with pytest.raises(ConfigError, match="max_inflight_groups"):
        load_config(overrides=["orchestrator.max_inflight_groups=-1"])


def test_auto_scheduling_is_continuous_on_vllm_and_batch_on_the_built_in_engine() -> None:
    from training.orchestrator.__main__ import continuous_schedule

    def resolve(*overrides: str) -> bool:
        return continuous_schedule(load_config(overrides=["orchestrator.async_level=1", *overrides]))

    assert load_config().orchestrator.scheduling == "auto"
    assert resolve() is False  # built-in engine
    assert resolve("inference.backend=vllm", "model.path=/ckpt") is True
    assert resolve("orchestrator.scheduling=continuous") is True
    assert resolve("inference.backend=vllm", "model.path=/ckpt", "orchestrator.scheduling=batch") is False
    # async_level=0 is always the batch schedule (bitwise-exact resume)
    exact = ["orchestrator.async_level=0", "orchestrator.scheduling=continuous"]
    assert continuous_schedule(load_config(overrides=exact)) is False
