"""The package's own checks: data from the seed, no held-out pair in training, the reward."""

from __future__ import annotations

import pytest

pytest.importorskip("verifiers")  # the training extra
import vf_arithmetic  # after the skip: it imports verifiers


def _pairs(ds: object) -> set[tuple[int, int]]:
    out = set()
    for row in ds:  # type: ignore[attr-defined]
        a, b = (int(x) for x in row["prompt"][-1]["content"].rstrip("=").split("+"))
        assert int(row["answer"]) == a + b
        out.add((min(a, b), max(a, b)))
    return out


def test_the_splits_are_seeded_and_disjoint() -> None:
    env = vf_arithmetic.load_environment(digits=2, num_train=50, num_eval=20, seed=7)
    again = vf_arithmetic.load_environment(digits=2, num_train=50, num_eval=20, seed=7)
    train, held = _pairs(env.get_dataset()), _pairs(env.get_eval_dataset())
    assert len(train) == 50 and len(held) == 20 and not train & held
    assert list(env.get_dataset()["answer"]) == list(again.get_dataset()["answer"])


def test_the_reward_is_the_exact_sum() -> None:
    assert vf_arithmetic.exact_sum([{"role": "assistant", "content": " 12\n"}], "12") == 1.0
    assert vf_arithmetic.exact_sum([{"role": "assistant", "content": "13"}], "12") == 0.0


def test_bad_arguments_say_which() -> None:
    with pytest.raises(ValueError, match="digits"):
        vf_arithmetic.load_environment(digits=9)
