"""The package's own checks: seeded problems from reasoning-gym, scored by its scorer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("verifiers")  # the training extra
pytest.importorskip("reasoning_gym")  # this environment's dependency (the dev extra)
import vf_reasoning_gym  # after the skips
from verifiers.utils.message_utils import normalize_messages

TWO_TERMS = {"min_terms": 2, "max_terms": 2}


def test_problems_are_generated_from_the_seed_with_the_given_config() -> None:
    env = vf_reasoning_gym.load_environment(config=TWO_TERMS, num_train=4, num_eval=2)
    again = vf_reasoning_gym.load_environment(config=TWO_TERMS, num_train=4, num_eval=2)
    rows = list(env.get_dataset())
    assert len(rows) == 4 and len(list(env.get_eval_dataset())) == 2
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in again.get_dataset()]
    assert rows[0]["prompt"][0]["role"] == "system" and "<answer>" in rows[0]["prompt"][0]["content"]


def _score(env: Any, text: str) -> float:
    completion = normalize_messages([{"role": "assistant", "content": text}], field_name="completion")
    return float(asyncio.run(env.rubric.funcs[0](completion=completion, answer="0")))


def test_the_reward_is_reasoning_gyms_score_of_the_tagged_answer() -> None:
    env = vf_reasoning_gym.load_environment(num_train=1, num_eval=1)
    assert _score(env, f"<answer>{env.rg_dataset[0]['answer']}</answer>") == 1.0
    assert _score(env, "<answer>not a number</answer>") == 0.0
