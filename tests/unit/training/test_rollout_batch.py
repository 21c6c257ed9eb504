import pytest

from training.orchestrator.batch import (
    Rollout,
    RolloutGroup,
    TaskSampler,
    collate,
    group_advantages,
    pack,
    shard,
    split_stale,
    to_samples,
)


def group(version: int, rewards: list[float], idx: int = 0, length: int = 3) -> RolloutGroup:
    return RolloutGroup(
        f"t{idx}", idx, [Rollout([1, 2], [5] * length, [-0.5] * length, r, version) for r in rewards]
    )


def test_group_relative_advantages() -> None:
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages([1.0, 1.0]) == [0.0, 0.0]
    norm = group_advantages([1.0, 0.0, 0.0, 1.0], normalize_std=True)
    assert norm[0] == pytest.approx(1.0, abs=1e-4)


def test_stale_groups_are_split_off() -> None:
    groups = [group(5, [1, 0]), group(3, [1, 0]), group(2, [0, 1])]
    fresh, stale = split_stale(5, groups, max_off_policy_steps=2)
    assert [g.version for g in fresh] == [5, 3]
    assert [g.version for g in stale] == [2]


def test_pack_respects_token_budget_and_keeps_every_sample() -> None:
    samples = to_samples([group(0, [1, 0, 0, 1], i, length=1 + i) for i in range(5)])
    bins = pack(samples, micro_batch_tokens=24, row_tokens=12)
    packed = [s for mb in bins for row in mb for s in row]
    assert sorted(map(id, packed)) == sorted(map(id, samples))
    for mb in bins:
        widths = [sum(len(s.input_ids) for s in row) for row in mb]
        assert all(w <= 12 for w in widths)
        assert len(mb) * max(widths) <= 24
    assert any(len(row) > 1 for mb in bins for row in mb)  # short samples share a row
    mb = collate(bins[0], pad_id=0)
    assert mb["input_ids"].shape == mb["loss_mask"].shape == mb["position_ids"].shape
    # The loss covers completion tokens only, and padding carries no loss.
    assert mb["loss_mask"].sum().item() == sum(sum(s.loss_mask) for row in bins[0] for s in row)


def test_collate_restarts_positions_per_document() -> None:
    a, b = to_samples([group(0, [1.0], 0, length=2), group(0, [0.0], 1, length=1)])
    mb = collate([[a, b], [b]], pad_id=0)
    assert mb["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2], [0, 1, 2, 0, 0, 0, 0]]
    assert mb["doc_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, -1, -1, -1, -1]]
    assert mb["attention_mask"].tolist() == [[1] * 7, [1, 1, 1, 0, 0, 0, 0]]
    assert mb["input_ids"].tolist()[0] == a.input_ids + b.input_ids


def test_shard_balances_ranks() -> None:
    samples = to_samples([group(0, [1, 0], i, length=2 + i) for i in range(6)])
    ranks = shard(pack(samples, 16), 2)
    assert len(ranks) == 2 and len(ranks[0]) == len(ranks[1])
    loads = [sum(len(s.input_ids) for mb in r for row in mb for s in row) for r in ranks]
    assert sum(loads) == sum(len(s.input_ids) for s in samples)
    assert abs(loads[0] - loads[1]) <= 16


def test_task_sampler_resumes_without_repeats_or_gaps() -> None:
    a = TaskSampler(10, seed=1)
    first = a.draw(4)
    a.give_back([first[1]])
    state = a.state_dict()
    rest_a = a.draw(12)
    b = TaskSampler(10, seed=1)
    b.load_state_dict(state)
    assert b.draw(12) == rest_a
    # One epoch covers every task exactly once.
    c = TaskSampler(7, seed=2)
    assert sorted(c.draw(7)) == list(range(7))
    with pytest.raises(ValueError):
        TaskSampler(11, seed=1).load_state_dict(state)
