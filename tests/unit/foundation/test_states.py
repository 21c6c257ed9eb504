from __future__ import annotations

import pytest

from opsctl.slurm.states import Gres, gpu_summary, gpus_in_tres, gpus_per_node, normalize_state, parse_gres


@pytest.mark.parametrize(
    ("text", "extra", "base", "flags"),
    [
        ("IDLE+DRAIN", None, "idle", {"DRAIN"}),
        ("DOWN*+DRAIN", None, "down", {"DRAIN", "NOT_RESPONDING"}),
        ("MIXED+DRAIN", None, "mixed", {"DRAIN"}),
        ("ALLOCATED+COMPLETING", None, "allocated", {"COMPLETING"}),
        ("IDLE+CLOUD+POWERED_DOWN", None, "idle", {"CLOUD", "POWERED_DOWN"}),
        ("idle", ["DRAIN"], "idle", {"DRAIN"}),
        ("down", ["NOT_RESPONDING", "DRAIN"], "down", {"DRAIN", "NOT_RESPONDING"}),
        ("drain*", None, "idle", {"DRAIN", "NOT_RESPONDING"}),
        ("drained*", None, "idle", {"DRAIN", "NOT_RESPONDING"}),
        ("drng", None, "allocated", {"DRAIN"}),
        ("mix", None, "mixed", set()),
        ("alloc", None, "allocated", set()),
        ("idle~", None, "idle", {"POWERED_DOWN"}),
        ("inval", None, "down", {"INVALID_REG"}),
        ("IDLE+NO_RESPOND", None, "idle", {"NOT_RESPONDING"}),
        # NPC/PERFCTRS: Slurm's NET state (an idle node held for network performance counters),
        # slurm_protocol_defs.c in 22.05 and 24.11; it says nothing about the node responding
        ("npc", None, "idle", {"PERFCTRS"}),
        ("PERFCTRS", None, "idle", {"PERFCTRS"}),
        ("IDLE+PERFCTRS", None, "idle", {"PERFCTRS"}),
    ],
)
def test_normalize_state(text: str, extra: list[str] | None, base: str, flags: set[str]) -> None:
    assert normalize_state(text, extra) == (base, flags)


def test_parse_gres_variants() -> None:
    assert parse_gres("gpu:h200:8") == [Gres("gpu", "h200", 8)]
    assert parse_gres("gpu:gen:8(S:0-1)") == [Gres("gpu", "gen", 8)]
    assert parse_gres("gpu:8") == [Gres("gpu", "", 8)]
    assert parse_gres("gpu:h200:4(IDX:0,2-3),nic:1") == [Gres("gpu", "h200", 4), Gres("nic", "", 1)]
    assert parse_gres("gpu:h200:0(IDX:N/A)") == [Gres("gpu", "h200", 0)]
    assert parse_gres("(null)") == [] and parse_gres(None) == []
    assert gpu_summary("gpu:a100:4,gpu:h200:4") == (8, "a100")


def test_gpus_in_tres_and_per_node() -> None:
    assert gpus_in_tres("cpu=1,mem=7G,node=1,billing=608,gres/gpu=8") == 8
    assert gpus_in_tres("cpu=1,gres/gpu:h200=4") == 4
    assert gpus_in_tres("cpu=1,gres/gpu=8,gres/gpu:h200=8") == 8
    assert gpus_in_tres("") == 0
    assert gpus_per_node("gres:gpu:h200:8") == 8
    assert gpus_per_node("gres/gpu:0") == 0
    assert gpus_per_node("gres/gpu=4") == 4
    assert gpus_per_node("gres:gpu:2") == 2
    assert gpus_per_node(None) == 0
