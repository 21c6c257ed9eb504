"""Several sources as one: each fact of each node from the first source that has it.

``prometheus+ssh``: Prometheus for what the exporters see, SSH for what they cannot (mounts,
slurmd, NVLink link state, the kernel log's XIDs when Prometheus has none). The merge is per node
and per fact, so a node whose node_exporter is down still gets its InfiniBand ports over SSH, and
a node SSH cannot reach keeps everything Prometheus knows. ``provides`` is the union.

Two facts are not simply "first wins":

- XIDs: a source that only knows the last XID per GPU ("last-value") is taken only when no other
  source has the node's XIDs (a count or the kernel log sees a fatal XID a later harmless one hides).
- The boot: boot ids of different sources may be different strings for the same boot (the boot
  time "boot-<btime>" where node_exporter lacks the role's boot id metric vs the kernel's random
  boot_id), so they are never mixed. The boot comes from the first source that reports one for any
  node in this collection; a node that source lacks gets no boot id (unknown) rather than the
  other's. Its kind (Evidence.boot_kind) comes with it: remediation never compares boot ids of
  different kinds, so a pass whose kind differs from a latch's cannot prove a reboot (it never reads
  as one). XID events of another source that belong to its current boot are relabelled to the
  chosen boot id.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from opsctl.errors import Unreachable
from opsctl.evidence.base import Source
from opsctl.evidence.model import Evidence, GpuEvidence, IbPortEvidence

# Per-GPU fields merged one by one (the rest of GpuEvidence is identity: index, uuid, ...).
_GPU_FIELDS = (
    "ecc_dbe_volatile",
    "ecc_sbe_volatile",
    "ecc_sbe_per_hour",
    "retired_pages_sbe",
    "retired_pages_dbe",
    "retired_pages_pending",
    "remap_uncorrectable",
    "remap_pending",
    "remap_failure",
    "nvlink_links_total",
    "nvlink_links_down",
    "nvlink_crc_per_second",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "recovery_action",
    "reset_required",
    "thermal_throttle",
    "power_throttle",
    "temperature_c",
)
_IDENTITY = ("uuid", "pci_bus_id", "model")
_PORT_FIELDS = ("state", "phys_state", "rate_gbps", "link_layer")
_NODE_FIELDS = ("mounts", "slurmd_alive", "dcgm_incidents")


class CompositeSource:
    """A :class:`~opsctl.evidence.base.Source` over ``sources``, in order of preference."""

    def __init__(self, sources: Sequence[Source]) -> None:
        if len(sources) < 2:
            raise ValueError("a composite source needs at least two sources")
        self.sources = list(sources)
        self.name = "+".join(s.name for s in self.sources)

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        """Collect from every source at once. A source that cannot run at all leaves the others'
        facts (its error is kept in each node's ``raw["errors"]``); when none can run, this raises
        the first one's :class:`Unreachable`."""
        results: list[list[Evidence] | None] = []
        errors: dict[str, str] = {}
        first_error: Unreachable | None = None
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(self.sources)) as pool:
            futures = [pool.submit(s.collect, nodes, now) for s in self.sources]
            for source, fut in zip(self.sources, futures, strict=True):
                try:
                    results.append(fut.result())
                except Unreachable as exc:
                    results.append(None)
                    errors[source.name] = str(exc)
                    first_error = first_error or exc
        if all(r is None for r in results):
            assert first_error is not None
            raise first_error
        by_source = [{ev.node: ev for ev in r} if r is not None else {} for r in results]
        out = merge_evidence(nodes, [s.name for s in self.sources], by_source, now, self.name)
        if errors:
            for ev in out:
                ev.raw["errors"] = dict(errors)
        return out


# -- pure: several sources' evidence -> one ----------------------------------------------------
def merge_evidence(
    nodes: list[str],
    names: list[str],
    by_source: list[dict[str, Evidence]],
    now: float,
    name: str,
) -> list[Evidence]:
    """One :class:`Evidence` per node from each source's (``names[i]`` -> ``by_source[i]``, in
    order of preference)."""
    provides = frozenset().union(*(ev.provides for src in by_source for ev in src.values()))
    boot_source = next(
        (i for i, src in enumerate(by_source) if any(ev.reachable and ev.boot_id for ev in src.values())),
        None,
    )
    return [_merge_node(node, names, by_source, now, name, provides, boot_source) for node in nodes]


def _merge_node(
    node: str,
    names: list[str],
    by_source: list[dict[str, Evidence]],
    now: float,
    name: str,
    provides: frozenset[str],
    boot_source: int | None,
) -> Evidence:
    found = [(names[i], src[node]) for i, src in enumerate(by_source) if node in src]
    live = [(n, ev) for n, ev in found if ev.reachable]
    if not live:
        why = "; ".join(f"{n}: {ev.error or 'no evidence'}" for n, ev in found) or "no source answered"
        return Evidence(node, name, now, reachable=False, error=why)
    out = Evidence(node, name, now, provides=provides)
    # new only when every part is new: an SSH pass does not make a re-read Prometheus scrape new
    out.observed_at = min(ev.collected_at if ev.observed_at is None else ev.observed_at for _, ev in live)
    origin: dict[str, str] = {}
    raw: dict[str, Any] = {n: ev.raw for n, ev in live if ev.raw}

    def first(field: str) -> None:
        for n, ev in live:
            value = getattr(ev, field)
            if value is not None:
                setattr(out, field, value)
                origin[field] = n
                return

    first("gpu_count")
    out.gpus = _merge_gpus(live, origin)
    _merge_xids(out, live, origin)
    out.ib_ports = _merge_ports(live, origin)
    for field in _NODE_FIELDS:
        first(field)
    if boot_source is not None:
        chosen = by_source[boot_source].get(node)
        if chosen is not None and chosen.reachable and chosen.boot_id:
            out.boot_id, out.boot_kind, out.boot_time = chosen.boot_id, chosen.boot_kind, chosen.boot_time
            origin["boot"] = names[boot_source]
            _relabel_boot(out, {n: ev.boot_id for n, ev in live}, origin.get("xids", ""))
    out.probe_timeouts = sorted({p for _, ev in live for p in ev.probe_timeouts})
    down = [f"{n}: {ev.error}" for n, ev in found if not ev.reachable]
    if down:
        raw["unreachable"] = down
    raw["origin"] = origin
    out.raw = raw
    return out


def _merge_gpus(live: list[tuple[str, Evidence]], origin: dict[str, str]) -> list[GpuEvidence]:
    """The GPUs of the source that gave the GPU count; each field of each GPU (matched by index)
    from the first source that has it."""
    base = next(((n, ev) for n, ev in live if ev.gpu_count is not None), None)
    if base is None:
        return []
    gpus = [replace(g) for g in base[1].gpus]
    others = [(n, {g.index: g for g in ev.gpus}) for n, ev in live if n != base[0]]
    for g in gpus:
        for n, by_index in others:
            theirs = by_index.get(g.index)
            if theirs is None or (g.uuid and theirs.uuid and g.uuid != theirs.uuid):
                continue  # not the same GPU
            for field in (*_GPU_FIELDS, *_IDENTITY):
                if getattr(g, field) in (None, "") and getattr(theirs, field) not in (None, ""):
                    setattr(g, field, getattr(theirs, field))
                    origin.setdefault(f"gpu.{field}", n)
    return gpus


def _merge_xids(out: Evidence, live: list[tuple[str, Evidence]], origin: dict[str, str]) -> None:
    with_xids = [(n, ev) for n, ev in live if ev.xids is not None]
    chosen = next(((n, ev) for n, ev in with_xids if ev.xid_mode != "last-value"), None)
    chosen = chosen or (with_xids[0] if with_xids else None)
    if chosen is not None:
        n, ev = chosen
        out.xids = [replace(e) for e in ev.xids or []]
        out.xid_mode = ev.xid_mode
        origin["xids"] = n


def _merge_ports(live: list[tuple[str, Evidence]], origin: dict[str, str]) -> list[IbPortEvidence] | None:
    base = next(((n, ev) for n, ev in live if ev.ib_ports is not None), None)
    if base is None:
        return None
    origin["ib_ports"] = base[0]
    ports = [replace(p) for p in base[1].ib_ports or []]
    others = [(n, {(p.device, p.port): p for p in ev.ib_ports or []}) for n, ev in live if n != base[0]]
    for p in ports:
        for n, by_key in others:
            theirs = by_key.get((p.device, p.port))
            if theirs is None:
                continue
            for field in _PORT_FIELDS:
                if getattr(p, field) is None and getattr(theirs, field) is not None:
                    setattr(p, field, getattr(theirs, field))
            if p.counter_deltas is None and theirs.counter_deltas is not None:
                p.counter_deltas, p.window_seconds = dict(theirs.counter_deltas), theirs.window_seconds
                origin.setdefault("ib_counters", n)
    return ports


def _relabel_boot(out: Evidence, boots: dict[str, str], xid_source: str) -> None:
    """XID events stamped with their own source's current boot id belong to the current boot."""
    theirs = boots.get(xid_source, "")
    if not out.xids or not theirs or theirs == out.boot_id:
        return
    for e in out.xids:
        if e.boot_id == theirs:
            e.boot_id = out.boot_id
