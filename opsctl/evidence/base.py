"""The one interface every evidence source implements."""

from __future__ import annotations

from typing import Protocol

from opsctl.evidence.model import Evidence


class Source(Protocol):
    name: str

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        """One :class:`Evidence` per requested node, in the order given.

        A node the source cannot read gets ``reachable=False`` with the reason in ``error``; a
        source that cannot run at all raises :class:`opsctl.errors.Unreachable`.
        """
        ...
