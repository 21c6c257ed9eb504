"""Two nodes only (the default nspawn lab): a slow rail on one of them fails the run but cannot be
pinned on either node by pair tests alone; the verdicts say so rather than claim the rails clean."""

from __future__ import annotations

from opsctl.checks.model import Status
from opsctl.preflight.fabric import PairTest, pair_verdicts
from opsctl.preflight.isolate import RailResult, attribute
from opsctl.preflight.pairs import Pair, rounds

RAILS = ["mlx5_2", "mlx5_3"]


def test_a_slow_rail_between_two_nodes_is_a_pair_not_a_node() -> None:
    (only,) = rounds(["gpu-001", "gpu-002"], partners=2)
    (pair,) = only
    assert pair.nodes == {"gpu-001", "gpu-002"}
    results = [
        RailResult(pair.client, pair.server, "mlx5_2", 392.1, True),
        RailResult(pair.client, pair.server, "mlx5_3", 180.0, False, "180.0 < 360 Gb/s"),
    ]
    tests = [PairTest(0, Pair(pair.client, pair.server), False, results)]
    att = attribute(results)
    assert att.node_rails == {} and att.links == {}
    assert set(att.unisolated) == {("gpu-001", "gpu-002", "mlx5_3")}
    verdicts = {(v.node, v.code): v for v in pair_verdicts(["gpu-001", "gpu-002"], tests, att, 360.0)}
    for node, peer in (("gpu-001", "gpu-002"), ("gpu-002", "gpu-001")):
        unisolated = verdicts[(node, "fabric-ib-pair")]
        assert unisolated.status is Status.UNKNOWN and unisolated.evidence["peer"] == peer
        bw = verdicts[(node, "fabric-ib-write-bw")]
        assert bw.status is Status.OK  # not convicted ...
        assert bw.summary.startswith("1 of 2 rails >= 360 Gb/s with 1 partners; mlx5_3 failed"), bw.summary
