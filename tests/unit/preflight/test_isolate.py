"""Attribution of failing pair tests: a bad link between two healthy nodes is that link; a bad
HCA is that node and rail."""

from __future__ import annotations

from opsctl.preflight.isolate import RailResult, attribute

RAILS = [f"mlx5_{i}" for i in range(8)]


def _run(pairs, bad_rails=(), bad_links=()):
    """Results of pair tests on every rail: ``bad_rails`` (node, rail) and ``bad_links``
    ({a, b}) fail, all else passes."""
    out = []
    for a, b in pairs:
        for rail in RAILS:
            fail = (a, rail) in bad_rails or (b, rail) in bad_rails or {a, b} in [set(x) for x in bad_links]
            out.append(RailResult(a, b, rail, 120.0 if fail else 392.0, not fail))
    return out


def test_a_bad_link_between_two_healthy_nodes_is_the_link():
    pairs = [("n1", "n2"), ("n3", "n4"), ("n1", "n3"), ("n2", "n4")]
    att = attribute(_run(pairs, bad_links=[("n1", "n2")]))
    assert att.node_rails == {} and att.unisolated == {}
    assert set(att.links) == {("n1", "n2", r) for r in RAILS}


def test_a_bad_hca_is_that_node_and_rail():
    pairs = [("n1", "n2"), ("n3", "n4"), ("n1", "n3"), ("n2", "n4")]
    att = attribute(_run(pairs, bad_rails=[("n1", "mlx5_3")]))
    assert set(att.node_rails) == {("n1", "mlx5_3")}
    assert {(r.a, r.b) for r in att.node_rails[("n1", "mlx5_3")]} == {("n1", "n2"), ("n1", "n3")}
    assert att.links == {} and att.unisolated == {}


def test_one_failing_pair_without_other_evidence_is_unisolated_then_retests_decide():
    first = _run([("n1", "n2"), ("n3", "n4")], bad_rails=[("n2", "mlx5_5")])
    att = attribute(first)
    assert set(att.unisolated) == {("n1", "n2", "mlx5_5")}
    assert att.suspects() == {"n1": {"n2"}, "n2": {"n1"}}
    # retests against the known-good n3 and n4
    retest = _run([("n1", "n3"), ("n2", "n4")], bad_rails=[("n2", "mlx5_5")])
    att = attribute(first + retest)
    assert set(att.node_rails) == {("n2", "mlx5_5")} and att.unisolated == {} and att.links == {}


def test_a_node_failing_with_two_partners_is_bad_even_when_they_have_no_other_pass():
    results = [
        RailResult("n1", "n2", "mlx5_0", None, False, "Couldn't connect"),
        RailResult("n1", "n3", "mlx5_0", None, False, "Couldn't connect"),
    ]
    att = attribute(results)
    assert set(att.node_rails) == {("n1", "mlx5_0")}


def test_two_nodes_only_cannot_be_isolated():
    att = attribute(_run([("a", "b")], bad_rails=[("a", "mlx5_1")]))
    assert set(att.unisolated) == {("a", "b", "mlx5_1")} and att.node_rails == {}
