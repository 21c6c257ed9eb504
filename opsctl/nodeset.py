"""Slurm hostlist syntax (`gpu-[001-004,009]`), parsed with ClusterShell and validated.

Everything that takes node names from a user goes through `parse_nodeset`: it rejects anything
that is not a plain hostlist (no ClusterShell @groups or set operators, no shell metacharacters),
so a node name can never carry text a shell or Slurm would interpret.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from ClusterShell.NodeSet import NodeSet, NodeSetException

from opsctl.errors import UsageError

# Characters a hostlist expression may contain: names, digits, ranges and brackets.
_EXPR_RE = re.compile(r"^[A-Za-z0-9._,\[\]-]+$")
# One expanded node name: RFC 1123-ish labels, as Slurm node names are in practice.
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62})$")
MAX_NODES = 100_000


def parse_nodeset(expr: str) -> list[str]:
    """Expand a hostlist expression into sorted node names, or raise UsageError."""
    text = expr.strip()
    if not text:
        raise UsageError("empty node set")
    if not _EXPR_RE.match(text):
        bad = sorted({c for c in text if not re.match(r"[A-Za-z0-9._,\[\]-]", c)})
        raise UsageError(f"malformed node set {expr!r}: characters not allowed: {''.join(bad)!r}")
    size = _estimated_size(text)
    if size > MAX_NODES:
        raise UsageError(f"node set {expr!r} expands to {size} nodes (limit {MAX_NODES})")
    try:
        nodeset = NodeSet(text)
    except NodeSetException as exc:
        raise UsageError(f"malformed node set {expr!r}: {exc}") from None
    if len(nodeset) > MAX_NODES:
        raise UsageError(f"node set {expr!r} expands to {len(nodeset)} nodes (limit {MAX_NODES})")
    names = list(nodeset)
    if not names:
        raise UsageError(f"empty node set {expr!r}")
    for name in names:
        if not NODE_NAME_RE.match(name):
            raise UsageError(f"malformed node name {name!r} in node set {expr!r}")
    return names


_BRACKET_RE = re.compile(r"\[([^\[\]]*)\]")


def _estimated_size(text: str) -> int:
    """An upper bound of the expansion, computed without expanding (ClusterShell would build
    every name first: `n[0000000-9999999]` must be refused at once, not after seconds)."""
    total = 0
    depth, start = 0, 0
    elements = []
    for index, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            elements.append(text[start:index])
            start = index + 1
    for element in elements:
        count = 1
        for group in _BRACKET_RE.findall(element):
            width = 0
            for part in group.split(","):
                lo, _, hi = part.partition("-")
                if lo.isdigit() and hi.isdigit():
                    width += max(0, int(hi) - int(lo) + 1)
                else:
                    width += 1
            count *= max(width, 1)
        total += count
    return total


def fold(names: Iterable[str]) -> str:
    """Fold node names back into the shortest hostlist expression (`gpu-[001-003]`)."""
    names = list(names)
    if not names:
        return ""
    return str(NodeSet.fromlist(names))


T = TypeVar("T")
_DIGITS_RE = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[object, ...]:
    """gpu-2 before gpu-10: the digit runs compare as numbers (the name itself breaks ties)."""
    parts = _DIGITS_RE.split(name)
    return (*(int(p) if i % 2 else p for i, p in enumerate(parts)), name)


def node_sorted(items: Iterable[T], key: Callable[[T], str] = str) -> list[T]:
    """ITEMS (node names, or whatever KEY maps to one) in node-set order: the order ClusterShell's
    NodeSet lists the names in, as `fold` and every hostlist expansion do (node2 before node10),
    never string order (node1, node10, node11, node2). Names NodeSet cannot take fall back to
    natural order; duplicates are kept."""
    items = list(items)
    names = [key(item) for item in items]
    try:
        rank = {name: i for i, name in enumerate(NodeSet.fromlist(names))}
    except NodeSetException:
        rank = {}
    order = sorted(range(len(items)), key=lambda i: (rank.get(names[i], len(rank)), natural_key(names[i])))
    return [items[i] for i in order]


def expand(expr: str) -> list[str]:
    """Expand a hostlist that Slurm itself reported (trusted input; empty or '(null)' is none)."""
    text = expr.strip()
    if not text or text in {"(null)", "None", "N/A"}:
        return []
    try:
        return list(NodeSet(text))
    except NodeSetException:
        return [part for part in text.split(",") if part]
