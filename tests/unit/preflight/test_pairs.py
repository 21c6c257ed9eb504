"""The pair scheduler: every node covered, no node twice in a round, a bounded round count."""

from __future__ import annotations

import itertools

import pytest

from opsctl.preflight.pairs import Pair, check_rounds, retest_rounds, round_count, rounds


def _names(n: int) -> list[str]:
    return [f"gpu-{i:03d}" for i in range(1, n + 1)]


def _partners(schedule: list[list[Pair]]) -> dict[str, set[str]]:
    met: dict[str, set[str]] = {}
    for rnd in schedule:
        for p in rnd:
            met.setdefault(p.client, set()).add(p.server)
            met.setdefault(p.server, set()).add(p.client)
    return met


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 63, 64, 65, 511, 512])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_node_meets_k_distinct_partners_and_no_node_is_twice_in_a_round(n, k):
    names = _names(n)
    schedule = rounds(names, k)
    check_rounds(schedule)
    for rnd in schedule:
        used = [x for p in rnd for x in (p.client, p.server)]
        assert len(used) == len(set(used))
    met = _partners(schedule)
    assert set(met) == set(names)  # every node covered
    assert all(len(m) >= min(k, n - 1) for m in met.values())
    assert len(schedule) == round_count(n, k)
    # no pair is measured twice
    pairs = [p.nodes for rnd in schedule for p in rnd]
    assert len(pairs) == len(set(pairs))


def test_round_count_is_stated_for_64_and_512_nodes():
    # default k=2: two rounds whatever the fleet size (one more for an odd count)
    assert [round_count(64, 2), round_count(512, 2), round_count(65, 2), round_count(511, 2)] == [2, 2, 3, 3]
    assert [len(r) for r in rounds(_names(64), 2)] == [32, 32]
    assert [len(r) for r in rounds(_names(512), 2)] == [256, 256]
    # the bound never exceeds a full round robin
    assert round_count(3, 5) == 3 and round_count(2, 2) == 1 and round_count(1, 2) == 0


def test_a_full_round_robin_meets_everyone_once():
    names = _names(6)
    schedule = rounds(names, 5)
    pairs = {p.nodes for rnd in schedule for p in rnd}
    assert pairs == {frozenset(c) for c in itertools.combinations(names, 2)}


def test_servers_alternate_and_the_schedule_is_deterministic():
    a, b = rounds(_names(8), 2), rounds(_names(8), 2)
    assert a == b
    servers = [p.server for rnd in a for p in rnd]
    assert len(set(servers)) > 4


def test_check_rounds_refuses_a_node_in_two_pairs():
    with pytest.raises(ValueError, match="two pairs"):
        check_rounds([[Pair("a", "b"), Pair("b", "c")]])
    with pytest.raises(ValueError, match="itself"):
        check_rounds([[Pair("a", "a")]])


def test_retests_use_distinct_good_partners_and_stay_disjoint():
    good = ["g1", "g2", "g3"]
    sched = retest_rounds({"s1": {"s2"}, "s2": {"s1"}}, good, per_suspect=2)
    check_rounds(sched)
    met = _partners(sched)
    assert met["s1"] <= set(good) and met["s2"] <= set(good)
    assert len(met["s1"]) == 2 and len(met["s2"]) == 2
    assert not any(p.nodes == {"s1", "s2"} for rnd in sched for p in rnd)
    assert len(sched) == 2  # three good nodes serve two suspects twice in two rounds


def test_retests_without_good_nodes_are_empty():
    assert retest_rounds({"a": {"b"}, "b": {"a"}}, ["a", "b"]) == []
    one = retest_rounds({"a": set()}, ["g"], per_suspect=3)
    assert one == [[Pair("a", "g")]]
