"""Held-out evaluation ([eval]): pass@k, the recorded result, the environments and bad settings."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pytest

from training.config import ConfigError, load_config
from training.envs import load_environment
from training.inference.client import Completion
from training.orchestrator.evaluation import eval_environments, evaluate_env, pass_at_k


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    draws = list(combinations([True] * c + [False] * (n - c), k))
    return sum(any(d) for d in draws) / len(draws)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 0, 1), (4, 1, 1), (4, 1, 2), (4, 2, 3), (5, 4, 2), (6, 1, 6)])
def test_pass_at_k_is_the_chance_k_draws_hold_a_right_one(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_an_evaluation_scores_each_problem_and_names_the_versions_it_measured() -> None:
    env = load_environment("arithmetic", digits=1, num_train=10, num_eval=3)
    cfg = load_config(None, ["eval.size=2", "eval.samples=4", "eval.pass_k=[1, 2]", "eval.temperature=1.0"])
    asked: list[Any] = []

    def generate(indices: list[int], n: int, temperature: float, seed: int, data: Any) -> Any:
        asked.append((indices, n, temperature, seed, len(data)))
        # problem 0: 1 of 4 right; problem 1: none; tokens from policy versions 5..7
        right, wrong = data[0].answer + env.parser.stop, "x" + env.parser.stop
        texts = [[right, wrong, wrong, wrong], [wrong] * 4]
        return [(i, [Completion(list(t.encode()), [], t, "stop", (5 + i, 6 + i)) for t in texts[i]])
                for i in indices]

    result = evaluate_env(env, cfg.eval, generate, lambda tokens: bytes(tokens).decode(), 30, 17, 9)
    assert result is not None and asked == [([0, 1], 4, 1.0, 17, 2)]
    assert (result.env, result.step, result.size, result.samples) == ("arithmetic", 30, 2, 4)
    assert result.accuracy == pytest.approx(1 / 8)
    assert result.pass_at == {1: pytest.approx(1 / 8), 2: pytest.approx((1 - 3 / 6) / 2)}
    assert (result.policy_version, result.policy_version_max) == (5, 7)
    record = result.record()
    assert record["event"] == "eval" and record["eval_pass_at_2"] == pytest.approx(0.25)
    empty = load_environment("arithmetic", digits=1, num_train=10, num_eval=0)
    assert evaluate_env(empty, cfg.eval, generate, str, 0, 0, 0) is None


def test_eval_envs_default_to_the_training_environment_with_its_kwargs() -> None:
    train = load_environment("arithmetic", digits=1, num_train=10, num_eval=3)
    assert eval_environments(load_config(None, []), train) == [train]
    both = eval_environments(load_config(None, ['eval.envs=["reverse_text", "arithmetic"]']), train)
    assert [e.name for e in both] == ["reverse_text", "arithmetic"] and both[1] is train
    with pytest.raises(ValueError, match=r"eval.envs: .*unknown environment 'nope'"):
        eval_environments(load_config(None, ['eval.envs=["nope"]']), train)


@pytest.mark.parametrize(("override", "message"), [
    ("eval.samples=0", "eval.samples: must be >= 1"),
    ("eval.every=-1", "eval.every: must be >= 0"),
    ("eval.pass_k=[2]", r"eval.pass_k: 2 is not between 1 and eval.samples \(1\)"),
    ('eval.envs=["arithmetic", "arithmetic"]', "eval.envs: an environment is named twice"),
    ("orchestrator.eval_size=8", "orchestrator.eval_size: unknown key"),
])
def test_bad_eval_settings_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])
