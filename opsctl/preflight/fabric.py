"""``opsctl preflight --fabric``: prove the fabric before a large job, and tell a bad node from a
bad link. The same code runs from ``ansible-playbook playbooks/acceptance.yml``.

Phases, each on the nodes that passed the previous ones where it matters:

1. per node, over SSH (with the hardware discovery): InfiniBand port state from sysfs, NVLink
   fabric state and PCIe links from ``nvidia-smi -q``, NVSwitch devices, ``nvidia-smi topo -m``;
   firmware is compared across the whole set;
2. on idle nodes only (Slurm says ``idle``): ``dcgmi diag -r N`` and ``all_reduce_perf`` on the
   node's own GPUs;
3. across idle nodes: ``ib_write_bw`` per rail (one per HCA, GPUDirect from the GPU next to it)
   in rounds of disjoint pairs (:mod:`opsctl.preflight.pairs`), the failing pairs retested
   against known-good partners, the failures attributed to a node's rail or to a link
   (:mod:`opsctl.preflight.isolate`);
4. one ``all_reduce_perf`` over every idle, undrained node, through ``srun``.

Codes added to the per-node ones of :mod:`opsctl.preflight.fabric_judge`: fabric-ib-write-bw
(a node's rail, FAIL), fabric-ib-link (a link between two healthy nodes: WARN on both ends, the
link itself FAILs the run), fabric-ib-pair (a failing pair that could not be isolated: UNKNOWN on
both ends), fabric-nccl-multinode (the set as a whole).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opsctl.checks.model import Status, Verdict, worst
from opsctl.checks.runner import NodeReport
from opsctl.evidence.ssh import CommandResult, NodeRun, SshSettings, run_on_nodes
from opsctl.health.service import HealthResult
from opsctl.model import Node
from opsctl.parsers.nccl_tests import parse_nccl_tests
from opsctl.parsers.perftest_bw import parse_perftest_bw
from opsctl.preflight import fabric_judge as fj
from opsctl.preflight.collect import commands
from opsctl.preflight.fabric_collect import NodeFabricFacts, fabric_commands, fabric_facts
from opsctl.preflight.isolate import Attribution, RailResult, attribute
from opsctl.preflight.pairs import Pair, Round, check_rounds, retest_rounds, rounds
from opsctl.preflight.service import PreflightContext, node_report, preflight_ssh_settings, slurm_view

SOURCE = "ssh"
_RAIL_MARK_RE = re.compile(r"^@@rail (\S+) rc=(\d+)\s*$", re.M)
_DIAG_SECONDS = {1: 300.0, 2: 1800.0, 3: 7200.0}  # per node, generous: -r 3 runs for tens of minutes


@dataclass
class PairTest:
    round: int  # 0-based; retest rounds continue the numbering
    pair: Pair
    retest: bool
    results: list[RailResult] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "client": self.pair.client,
            "server": self.pair.server,
            "retest": self.retest,
            "rails": {
                r.rail: {"gbps": r.gbps, "ok": r.ok, **({"error": r.error} if r.error else {})}
                for r in self.results
            },
        }


@dataclass
class FabricResult:
    health: HealthResult  # per node: the discovery's and the fabric's verdicts
    pair_tests: list[PairTest] = field(default_factory=list)
    rounds: int = 0
    retest_rounds: int = 0
    attribution: Attribution = field(default_factory=Attribution)
    multinode: Verdict | None = None
    remediation: dict[str, Any] | None = None

    @property
    def link_faults(self) -> list[tuple[str, str, str, RailResult]]:
        return [(a, b, rail, r) for (a, b, rail), r in sorted(self.attribution.links.items())]

    @property
    def status(self) -> str:
        """FAIL when a node fails, a link is bad, a pair failed unattributed or the set's NCCL fails."""
        if (
            self.health.status == "FAIL"
            or self.attribution.links
            or self.attribution.unisolated
            or (self.multinode is not None and self.multinode.status is Status.FAIL)
        ):
            return "FAIL"
        if self.health.status == "UNKNOWN" or (
            self.multinode is not None and self.multinode.status is Status.UNKNOWN
        ):
            return "UNKNOWN"
        return self.health.status

    @property
    def exit_code(self) -> int:
        return {"OK": 0, "WARN": 0, "FAIL": 1, "UNKNOWN": 3}[self.status]

    def to_json(self) -> dict[str, Any]:
        doc = self.health.to_json()
        doc["status"] = self.status
        links = [
            {"a": a, "b": b, "rail": rail, "gbps": r.gbps, "error": r.error, "kind": "link"}
            for a, b, rail, r in self.link_faults
        ]
        links += [
            {"a": a, "b": b, "rail": rail, "gbps": r.gbps, "error": r.error, "kind": "unisolated"}
            for (a, b, rail), r in sorted(self.attribution.unisolated.items())
        ]
        doc["fabric"] = {
            "rounds": self.rounds,
            "retest_rounds": self.retest_rounds,
            "pairs": [t.to_json() for t in self.pair_tests],
            "node_rails": sorted(f"{n}/{rail}" for n, rail in self.attribution.node_rails),
            "links": links,
            "multinode": self.multinode.to_json() if self.multinode else None,
        }
        if self.remediation is not None:
            doc["remediation"] = self.remediation
        return doc


# -- phase 1: per node ------------------------------------------------------------------------
def _idle(view: dict[str, Node], node: str) -> tuple[bool, str]:
    """Whether the active tests may take the node's GPUs and HCAs: Slurm must say idle."""
    n = view.get(node)
    if n is None:
        return False, "idle state unknown (node not known to Slurm or Slurm unreachable)"
    if n.state != "idle" or n.jobs:
        return False, f"node is {n.state} in Slurm"
    return True, ""


def _add(reports: dict[str, NodeReport], verdicts: list[Verdict]) -> None:
    for v in verdicts:
        rep = reports[v.node]
        rep.verdicts.append(v)
        rep.status = worst([x.status for x in rep.verdicts])


# -- phase 3: pair bandwidth ------------------------------------------------------------------
def _bw_args(p: Any, rail: str, port: int, gpu: int | None) -> list[str]:
    args = [
        "ib_write_bw",
        "-d",
        rail,
        "-p",
        str(port),
        "-s",
        str(p.fabric_msg_bytes),
        "-n",
        str(p.fabric_iterations),
    ]
    args += ["-F", "--report_gbits"]
    if gpu is not None:
        args += [f"--use_cuda={gpu}", "--use_cuda_dmabuf"]
    return args


def pair_scripts(
    p: Any,
    rails: list[str],
    ports: list[int],
    gpus_client: list[int | None],
    gpus_server: list[int | None],
    server_host: str,
) -> tuple[str, str]:
    """(client script, server script): one ib_write_bw per rail, all at once, each output
    framed by ``@@rail NAME rc=N``. The client retries while the server is not listening yet."""
    limit = f"timeout {int(p.fabric_pair_timeout)}"
    server = ["d=$(mktemp -d)"]
    client = ["d=$(mktemp -d)"]
    for i, rail in enumerate(rails):
        srv = shlex.join(_bw_args(p, rail, ports[i], gpus_server[i]))
        cli = shlex.join([*_bw_args(p, rail, ports[i], gpus_client[i]), server_host])
        server.append(f'( {limit} {srv} >"$d/{i}" 2>&1; echo $? >"$d/{i}.rc" ) &')
        client.append(
            f'( n=0; while :; do {limit} {cli} >"$d/{i}" 2>&1; rc=$?; '
            f'if [ $rc -ne 0 ] && [ $n -lt 100 ] && grep -q "Couldn\'t connect to" "$d/{i}"; '
            f'then n=$((n+1)); sleep 0.2; continue; fi; echo $rc >"$d/{i}.rc"; break; done ) &'
        )
    tail = ["wait"]
    for i, rail in enumerate(rails):
        tail.append(f'echo "@@rail {rail} rc=$(cat "$d/{i}.rc" 2>/dev/null || echo 255)"; cat "$d/{i}"')
    tail.append('rm -rf "$d"')
    return "\n".join(client + tail), "\n".join(server + tail)


def split_rails(text: str) -> dict[str, tuple[int, str]]:
    """A pair script's output -> rail -> (exit status, that rail's output)."""
    out: dict[str, tuple[int, str]] = {}
    marks = list(_RAIL_MARK_RE.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out[m.group(1)] = (int(m.group(2)), text[m.end() : end])
    return out


def rail_results(
    pair: Pair, rails: list[str], client: CommandResult | None, why: str, floor: float
) -> list[RailResult]:
    """The client's view of each rail (the client is the side that measures)."""
    parts = split_rails(client.stdout) if client is not None else {}
    out = []
    for rail in rails:
        if rail not in parts:
            out.append(RailResult(pair.client, pair.server, rail, None, False, why or "no output"))
            continue
        rc, text = parts[rail]
        report = parse_perftest_bw(text)
        gbps = report.average_gbps()
        if rc != 0 or gbps is None:
            lines = report.errors or [line.strip() for line in text.splitlines() if line.strip()][-1:]
            out.append(
                RailResult(
                    pair.client, pair.server, rail, gbps, False, f"exit {rc}: {'; '.join(lines)}"[:200]
                )
            )
            continue
        ok = gbps >= floor
        out.append(
            RailResult(
                pair.client,
                pair.server,
                rail,
                round(gbps, 2),
                ok,
                "" if ok else f"{gbps:.1f} < {floor:g} Gb/s",
            )
        )
    return out


PairRunner = Callable[[Pair, int], list[RailResult]]


class SshPairRunner:
    """Runs one pair's rails over SSH: the server script on one end, the client on the other."""

    def __init__(self, ssh: SshSettings, p: Any, rails: list[str], gpus: dict[str, dict[str, int]]) -> None:
        self.ssh = dataclasses.replace(ssh, node_timeout=p.fabric_pair_timeout + ssh.connect_timeout + 30)
        self.p, self.rails, self.gpus = p, rails, gpus

    def _gpu(self, node: str, i: int) -> int | None:
        if not self.p.fabric_gpudirect:
            return None
        return self.gpus.get(node, {}).get(self.rails[i], i)

    def __call__(self, pair: Pair, slot: int) -> list[RailResult]:
        n = len(self.rails)
        ports = [self.p.fabric_port_base + slot * n + i for i in range(n)]
        host = self.ssh.hosts.get(pair.server, pair.server)
        cli, srv = pair_scripts(
            self.p,
            self.rails,
            ports,
            [self._gpu(pair.client, i) for i in range(n)],
            [self._gpu(pair.server, i) for i in range(n)],
            host,
        )
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            fs = pool.submit(run_on_nodes, self.ssh, [pair.server], {"bw": srv})
            fc = pool.submit(run_on_nodes, self.ssh, [pair.client], {"bw": cli})
            (server_run,), (client_run,) = fs.result(), fc.result()
        why = client_run.error or (f"server {pair.server}: {server_run.error}" if server_run.error else "")
        return rail_results(pair, self.rails, client_run.outputs.get("bw"), why, self.p.fabric_rail_gbps_min)


def run_rounds(
    schedule: list[Round], runner: PairRunner, parallel: int, first: int, retest: bool
) -> list[PairTest]:
    check_rounds(schedule)
    out: list[PairTest] = []
    for r, rnd in enumerate(schedule):
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(parallel, len(rnd)))) as pool:
            futures = [pool.submit(runner, pair, slot) for slot, pair in enumerate(rnd)]
            for pair, fut in zip(rnd, futures, strict=True):
                out.append(PairTest(first + r, pair, retest, fut.result()))
    return out


def pair_phase(
    nodes: list[str], runner: PairRunner, partners: int, retest_partners: int, parallel: int
) -> tuple[list[PairTest], int, int, Attribution]:
    first = rounds(nodes, partners)
    tests = run_rounds(first, runner, parallel, 0, retest=False)
    att = attribute(r for t in tests for r in t.results)
    extra: list[Round] = []
    suspects = att.suspects()
    if suspects and retest_partners:
        bad_nodes = {n for n, _ in att.node_rails} | set(suspects)
        good = [n for n in nodes if n not in bad_nodes]
        met = {
            s: {t.pair.client if t.pair.server == s else t.pair.server for t in tests if s in t.pair.nodes}
            for s in suspects
        }
        extra = retest_rounds(met, good, retest_partners)
        tests += run_rounds(extra, runner, parallel, len(first), retest=True)
        att = attribute(r for t in tests for r in t.results)
    return tests, len(first), len(extra), att


def pair_verdicts(nodes: list[str], tests: list[PairTest], att: Attribution, floor: float) -> list[Verdict]:
    out: list[Verdict] = []
    measured: dict[str, list[RailResult]] = {n: [] for n in nodes}
    for t in tests:
        for r in t.results:
            measured[r.a].append(r)
            measured[r.b].append(r)
    for node in nodes:
        bad = {rail: rs for (n, rail), rs in att.node_rails.items() if n == node}
        mine = measured[node]
        if bad:
            parts = []
            for rail, rs in sorted(bad.items()):
                figures = sorted({round(r.gbps) for r in rs if r.gbps is not None})
                span = f"{figures[0]}" if len(figures) == 1 else f"{figures[0]}-{figures[-1]}"
                what = f"{span} Gb/s" if figures else rs[0].error[:60]
                partners = sorted({r.b if r.a == node else r.a for r in rs})
                parts.append(f"{rail} {what} with {', '.join(partners)}")
            first_rail, rs = sorted(bad.items())[0]
            low = min((r.gbps for r in rs if r.gbps is not None), default=None)
            short = f"{first_rail} {low:.0f} Gb/s" if low is not None else f"{first_rail} no bandwidth"
            out.append(
                fj.v(
                    node,
                    "fabric-ib-write-bw",
                    Status.FAIL,
                    f"rail below {floor:g} Gb/s with every partner: {'; '.join(parts)}"[:300],
                    rails=sorted(bad),
                    floor_gbps=floor,
                    short=short,
                )
            )
        elif mine:
            ok = [r.gbps for r in mine if r.ok and r.gbps is not None]
            partners = sorted({r.b if r.a == node else r.a for r in mine})
            rails, passed = {r.rail for r in mine}, {r.rail for r in mine if r.ok}
            summary = f"{len(passed)} rails >= {floor:g} Gb/s with {len(partners)} partners"
            if passed != rails:
                # not convicted (a link, or a pair not isolated: their own codes say so), not all clean
                summary = (
                    f"{len(passed)} of {len(rails)} rails >= {floor:g} Gb/s with {len(partners)} partners; "
                    f"{', '.join(sorted(rails - passed))} failed with every partner measured, "
                    "not isolated to this node"
                )
            out.append(
                fj.v(
                    node,
                    "fabric-ib-write-bw",
                    Status.OK,
                    f"{summary} (min {min(ok):.0f})" if ok else summary,
                    partners=partners,
                    min_gbps=min(ok) if ok else None,
                )
            )
        for (a, b, rail), r in sorted(att.links.items()):
            if node in (a, b):
                peer = b if node == a else a
                what = f"{r.gbps:.0f} Gb/s" if r.gbps is not None else r.error[:60]
                out.append(
                    fj.v(
                        node,
                        "fabric-ib-link",
                        Status.WARN,
                        f"link to {peer} on {rail}: {what} (both ends fine with other partners)",
                        peer=peer,
                        rail=rail,
                        gbps=r.gbps,
                        short=f"link {peer} {rail}",
                    )
                )
        for (a, b, rail), r in sorted(att.unisolated.items()):
            if node in (a, b):
                peer = b if node == a else a
                out.append(
                    fj.v(
                        node,
                        "fabric-ib-pair",
                        Status.UNKNOWN,
                        f"pair with {peer} failed on {rail} ({r.error or r.gbps}); not isolated: "
                        "no known-good partner to retest against",
                        peer=peer,
                        rail=rail,
                        short=f"pair {peer} {rail} unisolated",
                    )
                )
    return out


# -- phase 4: NCCL across nodes ---------------------------------------------------------------
def multinode_nccl(ctx: PreflightContext, nodes: list[str], gpus: int) -> Verdict:
    p = ctx.preflight
    code, where = "fabric-nccl-multinode", ",".join(nodes)
    srun = shutil.which("srun")
    if srun is None:
        return fj.v(
            where, code, Status.UNKNOWN, "srun not installed here: all_reduce_perf across nodes not run"
        )
    argv = [
        srun,
        f"--nodes={len(nodes)}",
        f"--nodelist={where}",
        "--ntasks-per-node=1",
        "--exclusive",
        "--immediate=60",
        *p.fabric_srun_args,
    ]
    if ctx.config is not None and ctx.config.slurm.partition:
        argv.append(f"--partition={ctx.config.slurm.partition}")
    argv += [
        "all_reduce_perf",
        "-b",
        p.fabric_nccl_min_bytes,
        "-e",
        p.fabric_nccl_max_bytes,
        "-f",
        "2",
        "-g",
        str(gpus),
    ]
    env = dict(os.environ)
    if ctx.config is not None and ctx.config.slurm.slurm_conf:
        env["SLURM_CONF"] = ctx.config.slurm.slurm_conf
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=p.fabric_nccl_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return fj.v(
            where,
            code,
            Status.FAIL,
            f"all_reduce_perf across {len(nodes)} nodes timed out after {p.fabric_nccl_timeout:g}s",
            nodes=nodes,
            short="nccl multinode timed out",
        )
    reports = parse_nccl_tests(proc.stdout)
    rep = reports[-1] if reports else None
    floor = p.fabric_nccl_multinode_busbw_min
    if rep is None or not rep.complete:
        lines = (rep.failures if rep else []) or [
            ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()
        ][-2:]
        return fj.v(
            where,
            code,
            Status.FAIL,
            f"all_reduce_perf across {len(nodes)} nodes did not complete "
            f"(exit {proc.returncode}): {'; '.join(lines)}"[:300],
            nodes=nodes,
            short="nccl multinode failed",
        )
    busbw = rep.busbw_at_largest() or 0.0
    ev: dict[str, Any] = {"nodes": nodes, "ranks": len(rep.ranks), "busbw_gbs": busbw, "floor_gbs": floor}
    if busbw < floor:
        return fj.v(
            where,
            code,
            Status.FAIL,
            f"all_reduce busbw {busbw:g} GB/s across {len(nodes)} nodes < {floor:g}",
            **ev,
            short=f"nccl multinode {busbw:g} GB/s",
        )
    return fj.v(
        where,
        code,
        Status.OK,
        f"all_reduce busbw {busbw:g} GB/s across {len(nodes)} nodes (>= {floor:g})",
        **ev,
    )


# -- the pass -----------------------------------------------------------------------------------
def _phase_runs(ssh: SshSettings, nodes: list[str], cmd: str, seconds: float) -> dict[str, NodeRun]:
    if not nodes:
        return {}
    s = dataclasses.replace(ssh, node_timeout=seconds)
    return {r.node: r for r in run_on_nodes(s, nodes, {"cmd": cmd})}


def run_fabric(
    ctx: PreflightContext,
    nodes: list[str],
    *,
    now: float | None = None,
    runner: PairRunner | None = None,
) -> FabricResult:
    now = time.time() if now is None else now
    p = ctx.preflight
    ssh = preflight_ssh_settings(ctx)
    runs = run_on_nodes(ssh, nodes, {**commands(ssh.ib_sysfs_root), **fabric_commands(ssh.ib_sysfs_root)})
    view, view_error = slurm_view(ctx, runs)
    reports: dict[str, NodeReport] = {}
    facts: dict[str, NodeFabricFacts] = {}
    gpu_counts: dict[str, int] = {}
    for run in runs:
        report, hw = node_report(ctx, run, view, view_error)
        reports[run.node] = report
        if hw is not None:
            facts[run.node] = fabric_facts(run.node, run.outputs, hw.get("nvswitch_count"))
            gpu_counts[run.node] = int(hw.get("gpu_count") or 0)
    for node, f in facts.items():
        verdicts = fj.judge_ib_ports(node, f, p) + fj.judge_nvlink(node, f, p)
        verdicts += [fj.judge_pairing(node, f, p), fj.judge_pcie(node, f, p)]
        _add(reports, verdicts)
    _add(reports, list(fj.judge_fw(list(facts.values()), p.ib_hcas).values()))

    idle = {n: _idle(view, n) for n in facts}
    active = [n for n in facts if idle[n][0]]
    for node in facts:
        if not idle[node][0]:
            why = idle[node][1] if not view_error else f"Slurm unreachable: {view_error}"[:120]
            skipped = [fj.v(node, "fabric-nccl-node", Status.UNKNOWN, f"not run: {why}", short="not idle")]
            skipped.append(
                fj.v(node, "fabric-ib-write-bw", Status.UNKNOWN, f"not run: {why}", short="not idle")
            )
            if p.fabric_dcgm_level:
                skipped.append(fj.judge_dcgm(node, p.fabric_dcgm_level, None, "", not_run=why))
            _add(reports, skipped)

    if p.fabric_dcgm_level and active:
        level = p.fabric_dcgm_level
        diag = _phase_runs(ssh, active, f"dcgmi diag -r {level} -j", _DIAG_SECONDS[level])
        _add(
            reports,
            [
                fj.judge_dcgm(n, level, r.outputs["cmd"].rc, r.outputs["cmd"].stdout)
                if "cmd" in r.outputs
                else fj.judge_dcgm(n, level, None, "", not_run=r.error or "no output")
                for n, r in diag.items()
            ],
        )
    if active:
        nccl = {
            n: _phase_runs(
                ssh,
                [n],
                shlex.join(
                    [
                        "all_reduce_perf",
                        "-b",
                        p.fabric_nccl_min_bytes,
                        "-e",
                        p.fabric_nccl_max_bytes,
                        "-f",
                        "2",
                        "-g",
                        str(gpu_counts[n] or 1),
                    ]
                ),
                p.fabric_nccl_timeout,
            )[n]
            for n in active
        }
        _add(
            reports,
            [
                fj.judge_nccl_node(
                    n,
                    r.outputs["cmd"].rc,
                    r.outputs["cmd"].stdout + r.outputs["cmd"].stderr,
                    p.fabric_nccl_busbw_min,
                )
                if "cmd" in r.outputs
                else fj.judge_nccl_node(n, None, r.error, p.fabric_nccl_busbw_min)
                for n, r in nccl.items()
            ],
        )

    result = FabricResult(HealthResult(reports=[], source=SOURCE, generated_at=now))
    rails = list(p.ib_hcas) or sorted({q.hca for f in facts.values() for q in f.ports})
    if len(active) >= 2 and rails:
        pairing = {n: {h: g for h, (g, _) in fj.gpu_for_hca(facts[n], rails).items()} for n in active}
        run_pair = runner or SshPairRunner(ssh, p, rails, pairing)
        tests, n_first, n_retest, att = pair_phase(
            active, run_pair, p.fabric_partners, p.fabric_retest_partners, max(1, ssh.parallel // 2)
        )
        result.pair_tests, result.rounds, result.retest_rounds, result.attribution = (
            tests,
            n_first,
            n_retest,
            att,
        )
        _add(reports, pair_verdicts(active, tests, att, p.fabric_rail_gbps_min))
        drained = {n for n in active if (x := view.get(n)) is not None and x.drain_flag}
        ring = [n for n in active if n not in drained]
        if p.fabric_nccl_multinode and len(ring) >= 2:
            result.multinode = multinode_nccl(ctx, ring, min(gpu_counts[n] for n in ring) or 1)
    elif len(active) == 1:
        _add(
            reports,
            [
                fj.v(
                    active[0],
                    "fabric-ib-write-bw",
                    Status.UNKNOWN,
                    "no second idle node to pair with",
                    short="no partner",
                )
            ],
        )
    result.health.reports = sorted(reports.values(), key=lambda r: r.node)
    return result


def remediate(ctx: PreflightContext, result: FabricResult, run_id: str, now: float | None = None) -> None:
    """Drain the nodes that FAIL through the health policy (storm, brake, ownership, audit): the
    watcher's path, ``opsctl:watch:launch-node-failed:<code> <evidence> in run <id>``. A bad link
    or the set's NCCL figure drains nobody."""
    from opsctl.errors import ConfigError
    from opsctl.remediation.passes import drain_failed_nodes

    if ctx.config is None or ctx.slurm is None:
        raise ConfigError(f"--remediate needs Slurm: {ctx.slurm_error or 'no backend configured'}")
    failed: dict[str, str] = {}
    for rep in result.health.reports:
        bad = [v for v in rep.verdicts if v.status is Status.FAIL]
        if bad:
            failed[rep.node] = f"{bad[0].code} {bad[0].short_evidence}"[:60]
    decisions = drain_failed_nodes(ctx.config, ctx.slurm, failed, run_id, now=now) if failed else []
    result.remediation = {"run_id": run_id, "failed": failed, "decisions": [d.to_json() for d in decisions]}
