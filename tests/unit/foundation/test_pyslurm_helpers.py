"""The pure helpers of the pyslurm backend (pyslurm itself cannot be installed against Slurm 22.05;
the backend's calls are exercised by the contract suite where pyslurm imports)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from opsctl.slurm.pyslurm_backend import PyslurmBackend, _gres_text, _values
from opsctl.slurm.states import gpu_summary


def test_gres_dicts_become_gres_strings() -> None:
    assert gpu_summary(_gres_text({"gpu:h200": 8})) == (8, "h200")
    assert gpu_summary(_gres_text({"gpu": {"type": "h200", "count": 4}})) == (4, "h200")
    assert gpu_summary(_gres_text({"gpu": 2})) == (2, "")
    assert _gres_text(None) == "" and _gres_text("gpu:h200:8") == "gpu:h200:8"


def test_collections_dict_or_list() -> None:
    assert _values({"a": 1, "b": 2}) == [1, 2]
    assert _values([3, 4]) == [3, 4]


def _pyslurm_node(allocated_gres: Any, configured_gres: Any = None) -> SimpleNamespace:
    return SimpleNamespace(
        name="gpu-001", state="MIXED", reason=None, reason_user=None, partitions=["gpu"],
        configured_gres={"gpu:h200": 8} if configured_gres is None else configured_gres,
        allocated_gres=allocated_gres, total_cpus=112, effective_cpus=108,
    )


def test_allocated_gpus_not_counted_twice() -> None:
    """pyslurm 23.11 to 25.11 build `Node.allocated_gres` from the node's AllocTRES
    (pyslurm/core/node.pyx: `gres_from_tres_dict(self.allocated_tres)`, which drops the `gres/`
    prefix): with typed GRES in AccountingStorageTRES, `AllocTRES=...,gres/gpu=8,gres/gpu:h200=8`
    becomes {"gpu": 8, "gpu:h200": 8}, the same 8 GPUs twice. The text parser counts the typed
    entries only when no untyped total is present; the pyslurm backend must do the same."""
    backend = PyslurmBackend(module=SimpleNamespace())
    shapes: list[tuple[Any, int]] = [
        ({"gpu": 8, "gpu:h200": 8}, 8),             # 23.11+: untyped total beside the typed count
        ({"gpu": 8, "gpu:h100": 4, "gpu:a100": 4}, 8),  # two types under one total
        ({"gpu": 3}, 3),                            # typed TRES not tracked
        ({"gpu:h200": 5}, 5),                       # only the typed entry
        ({"gpu": 2, "gpu:h200": 2, "gpumem": "80G"}, 2),  # other GRES beside the GPUs
        ({"gpu:h200": {"count": 8, "indexes": "0-7"}}, 8),  # 22.5/23.2: to_gres_dict(gres_used)
        ({}, 0),
    ]
    for allocated, want in shapes:
        node = backend._node(_pyslurm_node(allocated))
        assert (node.gpus_alloc, node.gpus_total, node.gpu_type) == (want, 8, "h200"), allocated
        assert node.cpus == 108  # effective_cpus (less CoreSpecCount), not total_cpus
