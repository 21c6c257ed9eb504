"""PrometheusSource.collect pauses the cyclic garbage collector while it parses and builds, and
leaves it as it found it, whether the pass succeeds or a query fails; the zero-valued series
_fill_zeros shares between nodes and families are never changed by building evidence."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from opsctl.errors import Unreachable
from opsctl.evidence.prometheus import PrometheusSource, _zero_series

NOW = 1_796_000_000.0
NODES = ["gpu-001", "gpu-002"]


def _fresh_only(states: list[bool]) -> Any:
    """A query function for two healthy nodes of 8 GPUs: fresh, reporting the ECC DBE family,
    which (healthy everywhere) comes back from no node; records whether the collector was enabled
    during each query."""
    nodes = NODES

    def query(q: str) -> list[dict[str, Any]]:
        states.append(gc.isenabled())
        if q.startswith("max by (Hostname"):
            return [{"metric": {"node": n, "gpu": str(g), "UUID": f"GPU-{n}-{g}"},
                     "value": [NOW, str(NOW - 2)]} for n in nodes for g in range(8)]
        if q.startswith("count by (__name__"):
            return [{"metric": {"__name__": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "node": n}, "value": [NOW, "8"]}
                    for n in nodes]
        return []

    return query


@pytest.fixture
def gc_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_collect_pauses_gc_and_restores_it(enabled: bool, gc_restored: None) -> None:
    (gc.enable if enabled else gc.disable)()
    seen: list[bool] = []
    evidence = PrometheusSource("http://unused", query_fn=_fresh_only(seen)).collect(NODES, NOW)
    assert [e.gpu_count for e in evidence] == [8, 8]
    assert len(seen) == len(PrometheusSource("http://unused").queries()) and not any(seen)
    assert gc.isenabled() is enabled


def test_a_failed_query_still_restores_gc(gc_restored: None) -> None:
    gc.enable()

    def down(q: str) -> list[dict[str, Any]]:
        raise Unreachable("prometheus down")

    with pytest.raises(Unreachable):
        PrometheusSource("http://unused", query_fn=down).collect(["gpu-001"], NOW)
    assert gc.isenabled()


def test_shared_zero_series_stay_zero() -> None:
    for _ in range(2):
        evidence = PrometheusSource("http://unused", query_fn=_fresh_only([])).collect(NODES, NOW)
        assert [g.ecc_dbe_volatile for e in evidence for g in e.gpus] == [0] * 16
    zero = _zero_series(("gpu", "3"))
    assert zero == {"metric": {"gpu": "3"}, "value": [0, "0"]}
    assert _zero_series(("gpu", "3")) is zero  # one object, whichever node and family asks
