"""Which nodes test against which, and when: rounds of disjoint pairs (pure, no I/O).

A pair test takes both ends' HCAs for its duration, so a node is in at most one pair per round,
and the pairs of a round can all run at the same time (no node is shared). The first rounds come
from the circle method of a round-robin tournament (a 1-factorization of the complete graph): fix
one seat, rotate the others, pair seat i with seat m-1-i. Every node meets ``partners`` distinct nodes in

    rounds(n, k) = min(k + (n odd), m - 1),   m = n rounded up to even

rounds: for an odd count the fixed seat is a bye, which a different node takes each round, so
k+1 rounds give every node at least k partners. The count does not grow with the fleet:
k=2 gives 2 rounds for 64 nodes (32 pairs each) and for 512 nodes (256 pairs each).

A failing pair is then retested against known-good partners (``retest_rounds``), again in rounds
of disjoint pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    client: str
    server: str

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset((self.client, self.server))


Round = list[Pair]


def round_count(n: int, partners: int) -> int:
    """Rounds :func:`rounds` makes for ``n`` nodes and ``partners`` partners per node."""
    if n < 2 or partners < 1:
        return 0
    m = n + (n % 2)
    return min(partners + (n % 2), m - 1)


def rounds(nodes: Sequence[str], partners: int = 2) -> list[Round]:
    """Rounds of disjoint pairs in which every node meets ``partners`` distinct nodes (all the
    others when there are fewer). Deterministic for the same node list."""
    names = list(dict.fromkeys(nodes))  # unique, order kept
    n = len(names)
    count = round_count(n, partners)
    if count == 0:
        return []
    seats: list[str | None] = [None, *names] if n % 2 else list(names)
    m = len(seats)
    fixed, ring = seats[0], seats[1:]
    out: list[Round] = []
    for r in range(count):
        turn = ring[r:] + ring[:r]
        arrangement = [fixed, *turn]
        pairs: Round = []
        for i in range(m // 2):
            a, b = arrangement[i], arrangement[m - 1 - i]
            if a is None or b is None:
                continue  # the bye
            # alternate who serves, so no node is always the server
            pairs.append(Pair(a, b) if (r + i) % 2 == 0 else Pair(b, a))
        out.append(pairs)
    return out


def check_rounds(schedule: Iterable[Round]) -> None:
    """Raise ValueError if a node is in two pairs of one round or a pair pairs a node with itself."""
    for i, rnd in enumerate(schedule):
        seen: set[str] = set()
        for p in rnd:
            if p.client == p.server:
                raise ValueError(f"round {i}: {p.client} paired with itself")
            if p.nodes & seen:
                raise ValueError(f"round {i}: {sorted(p.nodes & seen)} in two pairs")
            seen |= p.nodes


def retest_rounds(suspects: dict[str, set[str]], good: Sequence[str], per_suspect: int = 2) -> list[Round]:
    """Pair each suspect with up to ``per_suspect`` known-good nodes it has not met (its set in
    ``suspects``), in rounds where no node is in two pairs. A good node serves one suspect per
    round; suspects are never paired with each other (a failure must point at the suspect)."""
    met = {s: set(avoid) for s, avoid in suspects.items()}
    wanted = {s: per_suspect for s in suspects}
    pool = [g for g in dict.fromkeys(good) if g not in suspects]
    out: list[Round] = []
    while any(wanted.values()):
        used: set[str] = set()
        rnd: Round = []
        for s in sorted(suspects):
            if not wanted[s]:
                continue
            partner = next((g for g in pool if g not in used and g not in met[s]), None)
            if partner is None:
                if not any(g not in met[s] for g in pool):
                    wanted[s] = 0  # no good node left that it has not met
                continue
            used.add(partner)
            met[s].add(partner)
            wanted[s] -= 1
            rnd.append(Pair(s, partner))
        if not rnd:
            break
        out.append(rnd)
    return out
