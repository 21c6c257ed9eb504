"""Bad node or bad link? Attribution of failing pair tests, per rail (pure, no I/O).

A rail is one HCA index (``mlx5_3``): a pair test on rail r measures node A's HCA r to node B's
HCA r. For each rail, over every pair measured on it:

- a node is *bad on the rail* when it passed with no partner and failed with two partners or
  more: the common factor is the node (its HCA, its cable to the leaf, PCIe or GPU). One failing
  partner is not enough, even one that passed elsewhere: the link between them is as likely;
- a failing pair whose ends each passed with someone else is a *bad link*: both nodes are fine,
  the path between them is not (a cable, a switch port, a route);
- a failing pair neither rule explains is *unisolated* (not enough partners measured, e.g. a
  set of two nodes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RailResult:
    a: str  # client
    b: str  # server
    rail: str  # "mlx5_3"
    gbps: float | None  # None: no measurement (the test failed to run)
    ok: bool
    error: str = ""


@dataclass
class Attribution:
    # (node, rail) -> the failing results that convict it
    node_rails: dict[tuple[str, str], list[RailResult]] = field(default_factory=dict)
    # (a, b, rail) with a < b -> the failing result
    links: dict[tuple[str, str, str], RailResult] = field(default_factory=dict)
    unisolated: dict[tuple[str, str, str], RailResult] = field(default_factory=dict)

    def suspects(self) -> dict[str, set[str]]:
        """Nodes of unisolated pairs, with the partners they already met there."""
        out: dict[str, set[str]] = defaultdict(set)
        for a, b, _ in self.unisolated:
            out[a].add(b)
            out[b].add(a)
        return dict(out)


def _key(a: str, b: str, rail: str) -> tuple[str, str, str]:
    x, y = sorted((a, b))
    return (x, y, rail)


def attribute(results: Iterable[RailResult]) -> Attribution:
    by_rail: dict[str, list[RailResult]] = defaultdict(list)
    for r in results:
        by_rail[r.rail].append(r)
    out = Attribution()
    for rail, rs in sorted(by_rail.items()):
        passed: dict[str, set[str]] = defaultdict(set)
        failed: dict[str, list[RailResult]] = defaultdict(list)
        for r in rs:
            if r.ok:
                passed[r.a].add(r.b)
                passed[r.b].add(r.a)
            else:
                failed[r.a].append(r)
                failed[r.b].append(r)

        def partner(node: str, r: RailResult) -> str:
            return r.b if r.a == node else r.a

        bad: set[str] = set()
        for node, fails in failed.items():
            if passed[node]:
                continue
            if len({partner(node, r) for r in fails}) >= 2:
                bad.add(node)
        for node in sorted(bad):
            out.node_rails[(node, rail)] = failed[node]
        for r in rs:
            if r.ok or r.a in bad or r.b in bad:
                continue
            if passed[r.a] and passed[r.b]:
                out.links[_key(r.a, r.b, rail)] = r
            else:
                out.unisolated[_key(r.a, r.b, rail)] = r
    return out
