import pytest

from training.envs import REGISTRY, load_environment
from training.envs.arithmetic import pair_of
from training.envs.base import Environment, Parser, Rubric, Task, exact_answer


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


def test_arithmetic_eval_split_shares_no_unordered_pair_with_training() -> None:
    # 2 digits: 8100 ordered problems, so 4000 training problems would hit many commuted twins
    # (b+a for an eval a+b) if the split were by prompt string.
    env = load_environment("arithmetic", digits=2, num_train=4000, num_eval=200, seed=1234)
    train_pairs = {pair_of(t) for t in env.dataset}
    eval_pairs = [pair_of(t) for t in env.eval_dataset]
    assert not train_pairs & set(eval_pairs)
    assert len(set(eval_pairs)) == len(eval_pairs) == 200  # no twins inside eval either
    assert len({t.prompt for t in env.dataset}) == len(env.dataset) == 4000
    # Deterministic: the same seed gives the same split, another seed another one.
    again = load_environment("arithmetic", digits=2, num_train=4000, num_eval=200, seed=1234)
    assert again.dataset == env.dataset and again.eval_dataset == env.eval_dataset
    other = load_environment("arithmetic", digits=2, num_train=4000, num_eval=200, seed=99)
    assert other.eval_dataset != env.eval_dataset
    with pytest.raises(ValueError, match="not enough distinct problems"):
        load_environment("arithmetic", digits=1, num_train=90, num_eval=10)


def test_environments_declare_stop_sequences_matching_their_parser() -> None:
    for name in REGISTRY:
        env = load_environment(name, num_train=10, num_eval=5)
        assert env.parser.stop in env.stop_sequences
        task = env.dataset[0]
        assert env.demonstration(task).endswith(env.parser.stop)
    rubric = Rubric(funcs=[exact_answer], weights=[1.0])
    env = Environment("x", [], [], rubric, Parser(stop=";"), stop_sequences=(";", "\n"))
    assert env.stop_sequences == (";", "\n")
    with pytest.raises(ValueError, match="is not a stop string"):
        Environment("x", [], [], rubric, Parser(stop=";"))  # default stop is the newline only
    with pytest.raises(ValueError, match="non-empty"):
        Environment("x", [], [], rubric, Parser(), stop_sequences=("\n", ""))
