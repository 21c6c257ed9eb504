from __future__ import annotations

import pytest

from opsctl.errors import UsageError
from opsctl.nodeset import expand, fold, parse_nodeset


def test_hostlist_ranges_expand_in_order() -> None:
    assert parse_nodeset("gpu-[001-004,009]") == ["gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-009"]
    assert parse_nodeset("gpu-001,gpu-003") == ["gpu-001", "gpu-003"]


@pytest.mark.parametrize(
    "expr",
    ["", "   ", "gpu-[001-", "gpu-[3-1]", "gpu-001;reboot", "gpu-$(id)", "gpu 001", "@all", "gpu-001!gpu-002",
     "gpu-`x`", "gpu-001|x", "../etc", "-gpu"],
)
def test_malformed_or_dangerous_sets_are_usage_errors(expr: str) -> None:
    with pytest.raises(UsageError):
        parse_nodeset(expr)


@pytest.mark.parametrize("expr", ["n[0000000-9999999]", "r[1-1000]n[1-1000]", "a[1-60000],b[1-60000]"])
def test_huge_expansion_is_refused_without_expanding(expr: str) -> None:
    with pytest.raises(UsageError, match="expands to"):
        parse_nodeset(expr)


def test_multi_dimensional_sets_within_the_limit() -> None:
    assert len(parse_nodeset("r[1-2]n[01-32]")) == 64


def test_fold_and_expand_round_trip() -> None:
    names = ["gpu-001", "gpu-002", "gpu-003", "gpu-009"]
    assert fold(names) == "gpu-[001-003,009]"
    assert expand(fold(names)) == names
    assert expand("(null)") == []
    assert fold([]) == ""
