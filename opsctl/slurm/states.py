"""Normalize Slurm node states and GRES strings, whatever command or API reported them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from opsctl.slurm.base import SlurmError

BASE_STATES = {"idle", "allocated", "mixed", "down", "error", "future", "unknown"}

# sinfo's short and long state names (and scontrol's base names) -> (base state, implied flags).
_NAMED_STATES: dict[str, tuple[str, set[str]]] = {
    "idle": ("idle", set()),
    "alloc": ("allocated", set()),
    "allocated": ("allocated", set()),
    "mix": ("mixed", set()),
    "mixed": ("mixed", set()),
    "down": ("down", set()),
    "error": ("error", set()),
    "future": ("future", set()),
    "futr": ("future", set()),
    "unknown": ("unknown", set()),
    "unk": ("unknown", set()),
    "drain": ("idle", {"DRAIN"}),
    "drained": ("idle", {"DRAIN"}),
    "drng": ("allocated", {"DRAIN"}),
    "draining": ("allocated", {"DRAIN"}),
    "comp": ("allocated", {"COMPLETING"}),
    "completing": ("allocated", {"COMPLETING"}),
    "fail": ("down", {"FAIL"}),
    "failg": ("allocated", {"FAIL"}),
    "failing": ("allocated", {"FAIL"}),
    "inval": ("down", {"INVALID_REG"}),
    "maint": ("idle", {"MAINTENANCE"}),
    "resv": ("idle", {"RESERVED"}),
    "reserved": ("idle", {"RESERVED"}),
    "plnd": ("idle", {"PLANNED"}),
    "planned": ("idle", {"PLANNED"}),
    "boot": ("idle", {"REBOOT_ISSUED"}),
    # NPC (sinfo) and PERFCTRS (scontrol): NODE_STATE_NET, an idle node held for network
    # performance counters (slurm_protocol_defs.c); nothing to do with responding
    "npc": ("idle", {"PERFCTRS"}),
    "perfctrs": ("idle", {"PERFCTRS"}),
}

# sinfo suffixes -> flags.
_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}

# Flag spellings differ between scontrol, the OpenAPI plugins and pyslurm.
_FLAG_ALIASES = {"NO_RESPOND": "NOT_RESPONDING", "NOT_RESPOND": "NOT_RESPONDING", "DRAINED": "DRAIN",
                 "DRAINING": "DRAIN", "MAINT": "MAINTENANCE", "POWER_DOWN": "POWER_DOWN"}


# What Slurm prints for a node's state in full: node_state_string_complete() (`scontrol show node`) and
# openapi/v0.0.38's "state" and "state_flags", i.e. node_states[] and node_state_flags[] in
# src/common/slurm_protocol_defs.c of Slurm 22.05 and 24.11. PERFCTRS is 22.05's only (NODE_STATE_NET,
# removed in 24.05), BLOCKED 24.11's; "?" is Slurm's own word for a flag bit it has no name for.
SLURM_BASE_STATES = frozenset({"DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN"})
SLURM_STATE_FLAGS = frozenset({
    "BLOCKED", "CLOUD", "COMPLETING", "DRAIN", "DYNAMIC_FUTURE", "DYNAMIC_NORM", "INVALID_REG", "FAIL",
    "MAINTENANCE", "POWER_DOWN", "POWER_UP", "PERFCTRS", "POWERED_DOWN", "REBOOT_REQUESTED",
    "REBOOT_ISSUED", "RESERVED", "RESUME", "NOT_RESPONDING", "PLANNED", "POWERING_UP", "POWERING_DOWN", "?",
})


def slurm_node_state(node: str, text: str, flags: list[str] | None = None) -> tuple[str, set[str]]:
    """`normalize_state` for a state Slurm printed in full (`MIXED+DRAIN`; v0.0.38's "mixed" and
    ["DRAIN"]), refusing a word outside Slurm 22.05's and 24.11's: a state opsctl cannot read (a
    renamed flag, a new release's word) stops the caller instead of reaching it as a node in service."""
    base, *more = text.split("+")
    unknown = [word for word in [*more, *(flags or [])] if word.upper() not in SLURM_STATE_FLAGS]
    if base.upper() not in SLURM_BASE_STATES:
        unknown.insert(0, base)
    if unknown:
        shown = text + (f" {flags}" if flags else "")
        raise SlurmError(f"node {node or '?'}: Slurm node state {shown!r} has words opsctl does not know: "
                         f"{', '.join(map(repr, unknown))} (it reads the states of Slurm 22.05 and 24.11)")
    return normalize_state(text, flags)


def normalize_state(text: str, extra_flags: list[str] | None = None) -> tuple[str, set[str]]:
    """`IDLE+DRAIN`, `DOWN*+DRAIN`, `drain*`, `mix`, `idle` + ["DRAIN"] -> (base, flags)."""
    flags: set[str] = set()
    base = "unknown"
    parts = [p for p in re.split(r"[+,\s]+", text.strip()) if p]
    for index, part in enumerate(parts):
        while part and part[-1] in _SUFFIX_FLAGS:
            flags.add(_SUFFIX_FLAGS[part[-1]])
            part = part[:-1]
        lower = part.lower()
        if index == 0 and lower in _NAMED_STATES:
            base, implied = _NAMED_STATES[lower]
            flags |= implied
        elif index == 0 and lower in BASE_STATES:
            base = lower
        else:
            flag = part.upper()
            flags.add(_FLAG_ALIASES.get(flag, flag))
    for flag in extra_flags or []:
        flag = flag.upper()
        flags.add(_FLAG_ALIASES.get(flag, flag))
    return base, flags


@dataclass(frozen=True)
class Gres:
    name: str
    type: str
    count: int


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses (`gpu:h200:4(IDX:0,2-3),nic:1`)."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


_COUNT_RE = re.compile(r"^(\d+)([KMGTP]?)$")
_MULT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def parse_gres(text: str | None) -> list[Gres]:
    """`gpu:h200:8(S:0-1)`, `gpu:8`, `gpu:h200:4(IDX:0-3)`, `(null)` -> [Gres]."""
    if not text or text.strip() in {"(null)", "N/A", "None"}:
        return []
    result = []
    for item in _split_top_level(text.strip()):
        spec = item.split("(", 1)[0]
        parts = spec.split(":")
        if parts and parts[0].startswith("gres/"):
            parts[0] = parts[0][len("gres/"):]
        count = 1
        match = _COUNT_RE.match(parts[-1]) if len(parts) > 1 else None
        if match:
            count = int(match.group(1)) * _MULT[match.group(2)]
            parts = parts[:-1]
        name = parts[0]
        gtype = parts[1] if len(parts) > 1 else ""
        result.append(Gres(name=name, type=gtype, count=count))
    return result


def gpu_summary(gres: str | None) -> tuple[int, str]:
    """Total GPUs and the (first) GPU type in a GRES string."""
    gpus = [g for g in parse_gres(gres) if g.name == "gpu"]
    return sum(g.count for g in gpus), next((g.type for g in gpus if g.type), "")


def gpus_counted_once(gres: Iterable[Gres]) -> int:
    """GPUs among GRES counts that may list the untyped total beside each typed count (a node's
    AllocTRES `gres/gpu=8,gres/gpu:h200=8`, pyslurm's `allocated_gres` {"gpu": 8, "gpu:h200": 8}):
    the typed counts add up only when no untyped total is present, so no GPU is counted twice."""
    total, typed = None, 0
    for item in gres:
        if item.name != "gpu":
            continue
        if item.type:
            typed += item.count
        else:
            total = (total or 0) + item.count
    return total if total is not None else typed


def gpus_in_tres(tres: str | None) -> int:
    """GPUs in a TRES string such as `cpu=1,gres/gpu=4` or `gres/gpu:h200=4` (`gpus_counted_once`)."""
    if not tres:
        return 0
    gres = []
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key.startswith("gres/") and value.isdigit():
            name, _, gtype = key[len("gres/"):].partition(":")
            gres.append(Gres(name=name, type=gtype, count=int(value)))
    return gpus_counted_once(gres)


_GPU_IN_TRES_PER_NODE = re.compile(r"(?:^|[,/:])gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)")


def gpus_per_node(tres_per_node: str | None) -> int:
    """`gres:gpu:h200:8`, `gres/gpu:8`, `gres/gpu=8` -> 8."""
    if not tres_per_node:
        return 0
    match = _GPU_IN_TRES_PER_NODE.search(tres_per_node)
    return int(match.group(1)) if match else 0
