"""The package's own checks: the reward runs the program in the job's sandbox, and whatever the
program does wrong (or hostile) scores 0 without harming the scorer."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

pytest.importorskip("verifiers")  # the training extra
import vf_code_arithmetic as env  # after the skip: it imports verifiers

needs_sandbox = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                                reason="the sandbox runs programs as its own uids: root and bubblewrap")


def reward(code: str, answer: str = "6") -> float:
    return asyncio.run(env.prints_the_product([{"role": "assistant", "content": code}], answer))


@needs_sandbox
def test_a_program_that_prints_the_product_is_rewarded() -> None:
    assert reward("print(2*3)") == 1.0
    assert reward("```python\nx = 2\nprint(x * 3)\n```") == 1.0
    assert reward("print(2*4)") == 0.0 and reward("6") == 0.0  # wrong; not code


def test_an_empty_answer_scores_0_without_raising() -> None:
    # verifiers scores a rollout whose first token ended the turn with an empty completion
    assert asyncio.run(env.prints_the_product([], "6")) == 0.0
    assert reward("") == 0.0


@needs_sandbox
@pytest.mark.parametrize("code", [
    "import os\nwhile True: os.fork()",  # fork bomb
    "while True: pass",  # infinite loop
    "x = bytearray(1 << 30)\nprint(6)",  # memory hog
    "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\nprint(6)",  # network
    "open('/etc/opsctl-sandbox-escape', 'w').write('x')\nprint(6)",  # write outside
])
def test_bad_code_scores_0_and_harms_nothing(code: str) -> None:
    assert reward(code) == 0.0
    assert not os.path.exists("/etc/opsctl-sandbox-escape")
    assert reward("print(2*3)") == 1.0  # the sandbox still works after it


@needs_sandbox
def test_the_data_and_demonstrations_agree() -> None:
    e = env.load_environment(num_train=3, num_eval=1)
    row = dict(e.get_dataset()[0])
    asked = row["prompt"][-1]["content"].removeprefix("product of ").rstrip("?")
    a, b = (int(x) for x in asked.split(" and "))
    assert row["answer"] == str(a * b)
    (demo,) = env.demonstrations(1)
    user, program = (m["content"] for m in demo["messages"])
    x, y = (int(v) for v in user.removeprefix("product of ").rstrip("?").split(" and "))
    assert program == f"print({x}*{y})" and reward(program, str(x * y)) == 1.0


def test_the_shipped_demonstrations_are_the_generated_ones() -> None:
    import json
    from pathlib import Path

    shipped = (Path(env.__file__).parent / "demonstrations.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in shipped] == env.demonstrations(512, digits=2, operators="*+-%")
    # Noisy on purpose: every operator appears, so SFT cannot tell which one the question wants.
    ops = {json.loads(line)["messages"][1]["content"][6:-1].strip("0123456789") for line in shipped}
    assert ops == set("*+-%")
