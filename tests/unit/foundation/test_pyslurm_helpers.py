"""The pure helpers of the pyslurm backend (pyslurm itself cannot be installed against Slurm 22.05;
the backend's calls are exercised by the contract suite where pyslurm imports)."""

from __future__ import annotations

from opsctl.slurm.pyslurm_backend import _gres_text, _values
from opsctl.slurm.states import gpu_summary


def test_gres_dicts_become_gres_strings() -> None:
    assert gpu_summary(_gres_text({"gpu:h200": 8})) == (8, "h200")
    assert gpu_summary(_gres_text({"gpu": {"type": "h200", "count": 4}})) == (4, "h200")
    assert gpu_summary(_gres_text({"gpu": 2})) == (2, "")
    assert _gres_text(None) == "" and _gres_text("gpu:h200:8") == "gpu:h200:8"


def test_collections_dict_or_list() -> None:
    assert _values({"a": 1, "b": 2}) == [1, 2]
    assert _values([3, 4]) == [3, 4]
