"""Pure judgements of one node's fabric facts (and, for firmware, of the whole set).

Codes (stable; docs/fabric.md): fabric-ib-phys, fabric-ib-rate, fabric-ib-link-layer,
fabric-pkey, fabric-sm-lid, fabric-fw-mismatch, fabric-nvlink-state, fabric-nvswitch-count,
fabric-gpu-hca-pairing, fabric-pcie, fabric-dcgm-diag, fabric-nccl-node. The pair tests' codes
are in :mod:`opsctl.preflight.fabric`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from opsctl.checks.model import Status, Verdict
from opsctl.parsers.dcgmi_json import DcgmiFormatError, parse_dcgmi_diag
from opsctl.parsers.nccl_tests import parse_nccl_tests
from opsctl.parsers.nvidia_smi_topo import LINK_RANK
from opsctl.preflight.fabric_collect import IbPortFacts, NodeFabricFacts
from opsctl.preflight.settings import PreflightSection

SOURCE = "ssh"


def v(node: str, code: str, status: Status, summary: str, gpu: int | None = None, **ev: Any) -> Verdict:
    ev.setdefault("source", SOURCE)
    ev.setdefault("short", summary[:60])
    return Verdict(code=code, status=status, node=node, gpu=gpu, summary=summary, evidence=ev)


def _ports(f: NodeFabricFacts, hcas: list[str]) -> tuple[list[IbPortFacts], list[str]]:
    """The ports of the expected HCAs (every port when none is configured), and those missing."""
    if not hcas:
        return f.ports, []
    ports = [p for p in f.ports if p.hca in hcas]
    missing = [h for h in hcas if not any(p.hca == h for p in f.ports)]
    return ports, missing


def _per_port(
    node: str,
    code: str,
    ports: list[IbPortFacts],
    missing: list[str],
    bad: Callable[[IbPortFacts], str],
    ok: str,
    unread: Callable[[IbPortFacts], bool] = lambda q: False,
) -> Verdict:
    """One verdict over every port: FAIL naming each port ``bad`` describes (and missing HCAs);
    UNKNOWN when nothing is wrong but some port's file was not there to read."""
    problems = {f"{p.hca}/{p.port}": why for p in ports if not unread(p) and (why := bad(p))}
    problems.update({h: "missing" for h in missing})
    blind = sorted(f"{p.hca}/{p.port}" for p in ports if unread(p))
    if not ports and not missing:
        return v(node, code, Status.UNKNOWN, "no InfiniBand port read", short="no ports")
    if problems:
        listed = ", ".join(f"{k} {w}" for k, w in sorted(problems.items()))
        return v(node, code, Status.FAIL, listed, ports=problems, short=listed[:60])
    if blind:
        return v(
            node,
            code,
            Status.UNKNOWN,
            f"not readable on {', '.join(blind)}",
            short=f"{len(blind)} ports unread",
        )
    return v(node, code, Status.OK, ok, ports=len(ports))


def judge_ib_ports(node: str, f: NodeFabricFacts, p: PreflightSection) -> list[Verdict]:
    ports, missing = _ports(f, p.ib_hcas)
    out = [
        _per_port(
            node,
            "fabric-ib-phys",
            ports,
            missing,
            lambda q: "" if q.phys_state == "LinkUp" else f"phys {q.phys_state or '?'}",
            "every port LinkUp",
        ),
    ]
    if p.fabric_rate_detail or p.ib_rate_gbps:

        def rate(q: IbPortFacts) -> str:
            if p.fabric_rate_detail and q.rate_detail != p.fabric_rate_detail:
                return f"{q.rate_gbps or 0:g} Gb/s ({q.rate_detail or '?'})"
            if p.ib_rate_gbps and (q.rate_gbps or 0) < p.ib_rate_gbps:
                return f"{q.rate_gbps or 0:g} Gb/s"
            return ""

        want = p.fabric_rate_detail or f">= {p.ib_rate_gbps:g} Gb/s"
        out.append(_per_port(node, "fabric-ib-rate", ports, missing, rate, f"every port at {want}"))
    if p.fabric_link_layer:
        out.append(
            _per_port(
                node,
                "fabric-ib-link-layer",
                ports,
                missing,
                lambda q: "" if q.link_layer == p.fabric_link_layer else f"link layer {q.link_layer or '?'}",
                f"every port {p.fabric_link_layer}",
            )
        )
    if p.fabric_pkey:
        want_pkey = p.fabric_pkey.lower()
        full, limited = f"0x{int(want_pkey, 16) | 0x8000:04x}", f"0x{int(want_pkey, 16) & 0x7FFF:04x}"
        out.append(
            _per_port(
                node,
                "fabric-pkey",
                ports,
                missing,
                lambda q: "" if {full, limited, want_pkey} & set(q.pkeys) else f"no P_Key {want_pkey}",
                f"P_Key {want_pkey} on every port",
                lambda q: q.pkeys_read == 0,
            )
        )

    def sm(q: IbPortFacts) -> str:
        if q.state != "ACTIVE":
            return f"{q.state or 'no state'}"
        if not q.sm_lid:
            return "no SM LID (no subnet manager reached)"
        if not q.lid:
            return "no LID assigned"
        return ""

    out.append(
        _per_port(
            node,
            "fabric-sm-lid",
            ports,
            missing,
            sm,
            "every port has a LID from a subnet manager",
            lambda q: q.state == "ACTIVE" and q.sm_lid is None,
        )
    )
    return out


def judge_fw(facts: list[NodeFabricFacts], hcas: list[str]) -> dict[str, Verdict]:
    """Firmware must be identical across the set: the most common version (the highest on a tie)
    is the reference, and a node with any other version on an expected HCA FAILs."""
    versions: Counter[str] = Counter()
    for f in facts:
        ports, _ = _ports(f, hcas)
        versions.update(q.fw_ver for q in ports if q.fw_ver)
    out: dict[str, Verdict] = {}
    if not versions:
        return out
    top = max(versions.values())
    reference = max((ver for ver, n in versions.items() if n == top), key=_version_key)
    for f in facts:
        ports, _ = _ports(f, hcas)
        seen = {f"{q.hca}/{q.port}": q.fw_ver for q in ports if q.fw_ver}
        if not seen:
            out[f.node] = v(
                f.node, "fabric-fw-mismatch", Status.UNKNOWN, "no HCA firmware read", short="no fw"
            )
            continue
        odd = {k: fw for k, fw in seen.items() if fw != reference}
        if odd:
            listed = ", ".join(f"{k} {fw}" for k, fw in sorted(odd.items()))
            out[f.node] = v(
                f.node,
                "fabric-fw-mismatch",
                Status.FAIL,
                f"firmware differs from the fleet's {reference}: {listed}",
                reference=reference,
                firmware=seen,
                short=f"fw {sorted(set(odd.values()))[0]} != {reference}",
            )
        else:
            out[f.node] = v(
                f.node,
                "fabric-fw-mismatch",
                Status.OK,
                f"firmware {reference} on every HCA",
                reference=reference,
                fleet_versions=dict(versions),
            )
    return out


def _version_key(ver: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else -1 for x in ver.split("."))


def judge_nvlink(node: str, f: NodeFabricFacts, p: PreflightSection) -> list[Verdict]:
    out: list[Verdict] = []
    if not f.gpus:
        out.append(v(node, "fabric-nvlink-state", Status.UNKNOWN, "no GPU visible", short="no gpus"))
    else:
        states = {g.index: (g.fabric_state or "N/A", g.fabric_status or "N/A") for g in f.gpus}
        # no fabric at all reads N/A or Not Supported: wrong only where NVSwitches are expected;
        # a fabric that started and did not complete is wrong everywhere
        absent = ("N/A", "Not Supported")
        bad = {
            i: s
            for i, s in states.items()
            if (s[0] not in absent or p.fabric_nvswitches) and (s[0] != "Completed" or s[1] != "Success")
        }
        ev: dict[str, Any] = {"state": {str(i): f"{s[0]}/{s[1]}" for i, s in states.items()}}
        if bad:
            first = sorted(bad.items())[0]
            listed = ", ".join(f"GPU {i} {s[0]} ({s[1]})" for i, s in sorted(bad.items()))
            summary = f"NVLink fabric not up (is nvidia-fabricmanager running?): {listed}"
            out.append(
                v(
                    node,
                    "fabric-nvlink-state",
                    Status.FAIL,
                    summary,
                    gpu=first[0],
                    **ev,
                    short=f"nvlink fabric {first[1][0]} on {len(bad)} gpus",
                )
            )
        elif any(s[0] in absent for s in states.values()):
            out.append(v(node, "fabric-nvlink-state", Status.OK, "no NVSwitch fabric expected", **ev))
        else:
            out.append(v(node, "fabric-nvlink-state", Status.OK, "fabric state Completed on every GPU", **ev))
    if p.fabric_nvswitches:
        n = f.nvswitch_count
        if n is None:
            out.append(v(node, "fabric-nvswitch-count", Status.UNKNOWN, "NVSwitch devices not read"))
        elif n != p.fabric_nvswitches:
            out.append(
                v(
                    node,
                    "fabric-nvswitch-count",
                    Status.FAIL,
                    f"{n} NVSwitch devices, expected {p.fabric_nvswitches}",
                    seen=n,
                    expected=p.fabric_nvswitches,
                    short=f"{n}/{p.fabric_nvswitches} nvswitches",
                )
            )
        else:
            out.append(v(node, "fabric-nvswitch-count", Status.OK, f"{n} NVSwitches", seen=n))
    return out


def gpu_for_hca(f: NodeFabricFacts, hcas: list[str]) -> dict[str, tuple[int, str]]:
    """HCA -> (GPU index, link) from the topology matrix: the closest pairs first, each GPU and
    each HCA used once (the GPUDirect pairing NCCL makes on such a board)."""
    if f.topo is None:
        return {}
    cands = []
    for gpu in f.topo.gpus:
        for nic in f.topo.nics:
            dev, link = f.topo.nic_device(nic), f.topo.link(gpu, nic)
            if link in LINK_RANK and (not hcas or dev in hcas):
                cands.append((LINK_RANK[link], int(gpu[3:]), dev, link))
    pairing: dict[str, tuple[int, str]] = {}
    used: set[int] = set()
    for _, gpu_i, dev, link in sorted(cands, key=lambda c: (c[0], c[2], c[1])):
        if dev not in pairing and gpu_i not in used:
            pairing[dev] = (gpu_i, link)
            used.add(gpu_i)
    return pairing


def judge_pairing(node: str, f: NodeFabricFacts, p: PreflightSection) -> Verdict:
    code = "fabric-gpu-hca-pairing"
    if f.topo is None:
        return v(node, code, Status.UNKNOWN, f.topo_error or "no topology matrix", short="no topo")
    hcas = p.ib_hcas or [f.topo.nic_device(n) for n in f.topo.nics]
    pairing = gpu_for_hca(f, hcas)
    ev: dict[str, Any] = {
        "pairing": {h: {"gpu": g, "link": link} for h, (g, link) in sorted(pairing.items())}
    }
    missing = [h for h in hcas if h not in {f.topo.nic_device(n) for n in f.topo.nics}]
    if missing:
        return v(
            node,
            code,
            Status.FAIL,
            f"HCAs not in the topology: {', '.join(missing)}",
            **ev,
            short=f"{len(missing)} hcas not in topo",
        )
    unpaired = [h for h in hcas if h not in pairing]
    limit = LINK_RANK[p.fabric_pairing_link]
    far = {h: pl for h, pl in pairing.items() if LINK_RANK[pl[1]] > limit}
    if unpaired:
        return v(
            node, code, Status.FAIL, f"no GPU left for {', '.join(unpaired)}", **ev, short="hca without gpu"
        )
    if far:
        listed = ", ".join(f"{h}-GPU {g} {link}" for h, (g, link) in sorted(far.items()))
        worst = max((pl[1] for pl in far.values()), key=lambda link: LINK_RANK[link])
        # SYS crosses the socket link: GPUDirect RDMA there is slower than staging through host memory
        status = Status.FAIL if worst == "SYS" else Status.WARN
        return v(
            node,
            code,
            status,
            f"GPU and HCA further apart than {p.fabric_pairing_link}: {listed}",
            **ev,
            short=f"{len(far)} pairs {worst}",
        )
    return v(node, code, Status.OK, f"each HCA has its own GPU at {p.fabric_pairing_link} or closer", **ev)


def judge_pcie(node: str, f: NodeFabricFacts, p: PreflightSection) -> Verdict:
    """A link narrower than its maximum is FAIL (lanes lost do not come back); a lower speed
    WARNs on a GPU (an idle GPU may train down to save power) and FAILs on an HCA."""
    fails: dict[str, str] = {}
    warns: dict[str, str] = {}
    for g in f.gpus:
        key = f"GPU {g.index}"
        if g.pcie_width_current is not None and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
            fails[key] = f"x{g.pcie_width_current} of x{g.pcie_width_max}"
        if g.pcie_gen_current is not None and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max:
            warns[key] = f"gen{g.pcie_gen_current} of gen{g.pcie_gen_max}"
    ports, _ = _ports(f, p.ib_hcas)
    for q in ports:
        if q.pcie_width is not None and q.pcie_max_width and q.pcie_width < q.pcie_max_width:
            fails[q.hca] = f"x{q.pcie_width} of x{q.pcie_max_width}"
        if q.pcie_speed_gts and q.pcie_max_speed_gts and q.pcie_speed_gts < q.pcie_max_speed_gts:
            fails[q.hca] = f"{q.pcie_speed_gts:g} of {q.pcie_max_speed_gts:g} GT/s"
    judged = len(f.gpus) + sum(1 for q in ports if q.pcie_width is not None)
    if not judged:
        return v(node, "fabric-pcie", Status.UNKNOWN, "no PCIe link state read", short="no pcie data")
    ev: dict[str, Any] = {"degraded": fails, "slower": warns}
    if fails:
        listed = ", ".join(f"{k} {w}" for k, w in sorted(fails.items()))
        return v(node, "fabric-pcie", Status.FAIL, f"PCIe link degraded: {listed}", **ev)
    if warns:
        listed = ", ".join(f"{k} {w}" for k, w in sorted(warns.items()))
        return v(node, "fabric-pcie", Status.WARN, f"PCIe link below its generation: {listed}", **ev)
    return v(node, "fabric-pcie", Status.OK, f"{judged} PCIe links at full width and speed", **ev)


def judge_dcgm(node: str, level: int, rc: int | None, text: str, not_run: str = "") -> Verdict:
    """``dcgmi diag -r N -j``: FAIL on a failed test, UNKNOWN when it was not run (busy node),
    could not run (its ``runtime_error``), ran no test, or printed nothing readable."""
    code = "fabric-dcgm-diag"
    if not_run:
        return v(node, code, Status.UNKNOWN, f"dcgmi diag -r {level} not run: {not_run}", short=not_run[:60])
    try:
        report = parse_dcgmi_diag(text)
    except DcgmiFormatError as exc:
        return v(
            node, code, Status.UNKNOWN, f"dcgmi diag -r {level}: {exc}"[:200], rc=rc, short="diag unreadable"
        )
    failed = report.failed()
    if why := report.not_completed():
        return v(node, code, Status.UNKNOWN, f"dcgmi diag -r {level} {why}"[:300], rc=rc, short=why[:60])
    if failed:
        listed = "; ".join(
            f"{r.test}{'' if r.gpu is None else f' gpu {r.gpu}'}: {'; '.join(r.warnings)[:80]}"
            for r in failed
        )
        first = failed[0]
        return v(
            node,
            code,
            Status.FAIL,
            f"dcgmi diag -r {level} failed: {listed}"[:300],
            gpu=first.gpu,
            failed=[r.test for r in failed],
            short=f"diag {first.test} failed",
        )
    return v(node, code, Status.OK, f"dcgmi diag -r {level} passed ({len(report.results)} results)", rc=rc)


def judge_nccl_node(node: str, rc: int | None, text: str, floor: float) -> Verdict:
    """``all_reduce_perf`` on the node's own GPUs: the out-of-place bus bandwidth of the largest
    message size against ``floor`` (GB/s); a run that dies or reports wrong results FAILs."""
    code = "fabric-nccl-node"
    reports = parse_nccl_tests(text)
    rep = reports[-1] if reports else None
    if rep is None or not rep.complete:
        why = (
            "; ".join(rep.failures[:2])
            if rep and rep.failures
            else (text.strip().splitlines() or ["no output"])[-1]
        )
        return v(
            node,
            code,
            Status.FAIL,
            f"all_reduce_perf did not complete (exit {rc}): {why}"[:300],
            short="nccl did not complete",
        )
    busbw = rep.busbw_at_largest() or 0.0
    ev: dict[str, Any] = {
        "busbw_gbs": busbw,
        "floor_gbs": floor,
        "avg_busbw_gbs": rep.avg_busbw_gbs,
        "gpus": len(rep.ranks),
    }
    if rep.wrong_total() or rep.out_of_bounds:
        return v(
            node,
            code,
            Status.FAIL,
            f"all_reduce_perf reported {rep.wrong_total()} wrong elements",
            **ev,
            short="nccl wrong results",
        )
    if busbw < floor:
        return v(
            node,
            code,
            Status.FAIL,
            f"all_reduce busbw {busbw:g} GB/s < {floor:g} GB/s",
            **ev,
            short=f"nccl busbw {busbw:g} GB/s",
        )
    return v(node, code, Status.OK, f"all_reduce busbw {busbw:g} GB/s (>= {floor:g})", **ev)
