import pytest

from training.envs import REGISTRY, load_environment
from training.envs.base import Parser, Task


def test_registry_has_code_checked_tasks() -> None:
    assert {"arithmetic", "reverse_text"} <= set(REGISTRY)
    with pytest.raises(ValueError, match="unknown environment"):
        load_environment("chess")
    with pytest.raises(ValueError, match=r"env\.kwargs"):
        load_environment("arithmetic", bogus=1)


def test_arithmetic_rewards_are_checked_by_code() -> None:
    env = load_environment("arithmetic", digits=3, num_train=50, num_eval=20, seed=3)
    task = env.dataset[0]
    a, b = task.prompt.rstrip("=").split("+")
    assert task.answer == str(int(a) + int(b))
    assert all(100 <= int(x) <= 999 for x in (a, b))
    right, _ = env.rubric.score(task.answer + "\n", task, env.parser)
    wrong, _ = env.rubric.score(str(int(task.answer) + 1) + "\n", task, env.parser)
    unterminated, _ = env.rubric.score(task.answer, task, env.parser)
    assert (right, wrong, unterminated) == (1.0, 0.0, 0.0)
    # Held-out problems never appear in training.
    assert not {t.prompt for t in env.dataset} & {t.prompt for t in env.eval_dataset}


def test_reverse_text_partial_credit() -> None:
    env = load_environment("reverse_text", num_train=30, num_eval=10)
    task = Task("t", "rev:abcd=", "dcba")
    full, parts = env.rubric.score("dcba\n", task, env.parser)
    partial, _ = env.rubric.score("dcab\n", task, env.parser)
    none, _ = env.rubric.score("zzzz", task, env.parser)
    assert full == pytest.approx(1.5) and parts["exact_answer"] == 1.0
    assert 0 < partial < 1
    assert none == 0.0
    assert all(t.answer == t.prompt[4:-1][::-1] for t in env.dataset)


def test_parser() -> None:
    p = Parser()
    assert p.parse_answer(" 42\nrest") == "42"
    assert p.parse_answer("42") is None
    assert p.parse_answer("\n") is None
