"""The package's own checks: the tool, the reward and demonstrations that are good rollouts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verifiers")  # the training extra
import vf_tool_arithmetic as env  # after the skip: it imports verifiers


def test_the_environment_offers_the_add_tool_and_seeded_problems() -> None:
    e = env.load_environment(num_train=5, num_eval=2)
    assert [t.name for t in e.tool_defs] == ["add"]
    rows = list(e.get_dataset())
    assert len(rows) == 5 and len(list(e.get_eval_dataset())) == 2
    a, b = (int(x) for x in rows[0]["prompt"][-1]["content"].rstrip("=?").split("+"))
    assert rows[0]["answer"] == str(a + b) and len(str(a)) == 4


def test_a_demonstration_calls_the_tool_then_answers_with_its_result() -> None:
    (demo,) = env.demonstrations(1)
    user, call, tool, answer = demo["messages"]
    a, b = (int(x) for x in user["content"].rstrip("=?").split("+"))
    args = json.loads(call["tool_calls"][0]["function"]["arguments"])
    assert env.add(**args) == a + b == int(tool["content"])
    assert env.final_answer([answer], str(a + b)) == 1.0
    assert env.final_answer([tool], str(a + b)) == 0.0  # the tool's message is not an answer
