"""On-call rehearsal: the remediation service against the faults an on-call week brings, on a
simulated cluster of --nodes (64) 8-GPU nodes (bench/simrig.py: real slurmctld and slurmd, emulated
dcgm-exporter and node exporters scraped every 5 s by a real Prometheus, the sim's Alertmanager).

    .venv/bin/python bench/rehearsal.py [SCENARIO ...] [--nodes 64] [--prom-down-s 120] [--gap-s 360] [--json]

`opsctl remediator run` runs as a subprocess with the product's defaults for everything the
scenarios exercise ([health] max_drains, max_fraction, storm_*, resume_after_clean, [remediator]
interval); each scenario gets a fresh state file, decision log and service process. Only hardware is
simulated (the fault injection of `opsctl sim inject`). Scenarios and their pass conditions:

  xid79            XID 79 on one node: that node, and no other, drained with an opsctl:health: reason.
                   Reports injection-to-drain seconds.
  storm            XID 79 on 20 nodes at once: at most the brake's cap (min(max_drains,
                   max(1, max_fraction x nodes))) plus the fatal allowance (fatal_max_drains; XID 79 is
                   fatal) drained before the storm is seen, every other faulted node held with a decision that
                   says why (storm or brake), a storm alert decision, and OpsctlRemediationStorm active
                   in Alertmanager.
  prometheus-down  Prometheus stopped for --prom-down-s: no node drained, `opsctl health` exits 3, the
                   service's passes fail (Unreachable) and it keeps running; once Prometheus is back a
                   pass judges every node OK and still nothing is drained.
  flapping         a GPU's thermal fault (gpu-throttle FAIL, restart_app: resumed after clean passes,
                   no proof) set and cleared --flaps times, each clean spell shorter than one scrape:
                   one drain, no resume while it flaps, one resume once it stays clean.
  slurmctld-restart  slurmctld restarted with an XID 79 node already drained and a second one faulted
                   while it is down: the service survives, drains the second once it is back, and
                   never drains a node twice (one applied drain per node in the decision log).
  rma-backlog      6 of 64 nodes drained by an operator (`opsctl drain`: the 10% drain guardrail is
                   full), then XID 79 on a seventh: that node takes no new jobs (Slurm: drain), it is
                   latched in the state file, and a page-severity alert naming it is active in
                   Alertmanager; nothing else drained by health. The operator resumes the six after.
  false-storm-plus-xid  --storm-fault (ib_down=mlx5_0: ib-port FAILs) on every node and XID 79 on one:
                   that node drained for gpu-xid, no other node drained, and the storm alerts in
                   Alertmanager name only --storm-signature (the storm is per signature).
  prometheus-gap   Prometheus stopped for --gap-s, an XID 79 raised --gap-xid-after-s in (so it leaves
                   the exporter's 300 s XID window before Prometheus scrapes again): while down no drain
                   and OpsctlEvidenceSourceLost active; once back, that node drained (a fatal node never
                   silently left in service) within --gap-judge-s, nothing else.
  clock-step       an XID 79 node drained (latch: reboot), then its wall clock stepped --clock-step-s
                   (default: past its uptime, so the XID reads as one of an earlier boot and the node
                   looks clean; node_boot_time_seconds moves, the kernel boot id stays): judged clean,
                   yet still drained and latched after --clock-watch-s; after a real reboot (new boot
                   id) the service resumes it.

Prints one PASS/FAIL line per scenario (or --json: one document); exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from simrig import Rig, Service, node_state, resume, slurm_reasons, wait

from opsctl.hwsim.state import load as load_hw
from opsctl.hwsim.state import state_path
from opsctl.nodeset import expand
from opsctl.sim import monitoring
from opsctl.sim.addons import register_addon

ADDON = "monitoring-rehearsal"
HEALTH_PREFIX = "opsctl:health:"
STORM_NODES = 20
RMA_NODES = 6  # 6 of 64 nodes out for RMA fill the 10% drain guardrail (docs/runbook.md)
DRAIN_TIMEOUT_S = 120.0  # injection to drain, generous: 64 nodes on 2 shared cores


@dataclass
class Outcome:
    scenario: str
    ok: bool
    summary: str
    values: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass
class Options:
    interval: float
    prom_down_s: float
    flaps: int
    flap_fault_s: float
    flap_clean_s: float
    storm_fault: str = "ib_down=mlx5_0"
    storm_signature: str = "ib-port"
    gap_s: float = 360.0
    gap_xid_after_s: float = 5.0
    gap_judge_s: float = 180.0
    clock_step_s: float = 0.0
    clock_watch_s: float = 45.0


def _health_drains(rig: Rig) -> dict[str, str]:
    return {n: r for n, r in slurm_reasons(rig.env).items() if r.startswith(HEALTH_PREFIX)}


def _applied(svc: Service, action: str, node: str | None = None) -> list[dict[str, Any]]:
    return [d for d in svc.decisions() if d["action"] == action and d["result"] == "applied"
            and (node is None or d["node"] == node)]


def _passes(svc: Service, count: int, timeout: float) -> None:
    """Let ``count`` more passes of the service run."""
    st = wait(svc.status, 60, "a pass of the service")
    assert st is not None
    target = int(st["number"]) + count
    wait(lambda: (s := svc.status()) is not None and int(s["number"]) >= target, timeout,
         f"{count} more passes of the service")


def scenario_xid79(rig: Rig, svc: Service, opts: Options) -> Outcome:
    node = rig.sim.node_names[len(rig.sim.node_names) // 2]
    t0 = time.monotonic()
    monitoring.inject(rig.sim, node, "xid=79,gpu=2")
    while node not in slurm_reasons(rig.env):
        if time.monotonic() - t0 > DRAIN_TIMEOUT_S:
            return Outcome("xid79", False, f"{node} not drained within {DRAIN_TIMEOUT_S:.0f}s")
        time.sleep(0.2)
    latency = time.monotonic() - t0
    time.sleep(monitoring.SCRAPE_INTERVAL_S)  # another scrape: would anything else follow?
    _passes(svc, 2, 60)
    drains = _health_drains(rig)
    others = sorted(set(slurm_reasons(rig.env)) - {node})
    problems = []
    if node not in drains:
        problems.append(f"{node}'s reason is {slurm_reasons(rig.env).get(node)!r}, not {HEALTH_PREFIX}...")
    if others:
        problems.append(f"other nodes drained: {', '.join(others)}")
    return Outcome("xid79", not problems, f"{node} drained in {latency:.1f}s ({drains.get(node, '')})",
                   {"node": node, "inject_to_drain_s": round(latency, 2), "reason": drains.get(node, "")},
                   problems)


def _alertmanager_active(rig: Rig, alertname: str) -> list[dict[str, Any]]:
    info = monitoring.load_info(rig.sim)
    if info is None or not info.alertmanager_url:
        return []
    with urllib.request.urlopen(f"{info.alertmanager_url}/api/v2/alerts?active=true", timeout=10) as resp:
        alerts: list[dict[str, Any]] = json.loads(resp.read())
    return [a for a in alerts if a["labels"].get("alertname") == alertname]


def scenario_storm(rig: Rig, svc: Service, opts: Options) -> Outcome:
    from opsctl.health import service
    from opsctl.remediation.policy import brake_limit, storm_threshold

    health = service.load_context(str(rig.sim.config_path)).health  # the settings the service runs with
    size = len(rig.sim.node_names)
    # XID 79 is a fatal fault: past the brake's cap it may use the fatal allowance (docs/runbook.md)
    cap = brake_limit(health.policy(), size) + health.fatal_max_drains
    storm_at = storm_threshold(health.policy(), size)
    names = rig.sim.node_names
    faulted = names[1 :: max(1, len(names) // STORM_NODES)][:STORM_NODES]
    t0 = time.monotonic()
    for node in faulted:
        monitoring.inject(rig.sim, node, "xid=79,gpu=2")
    spread = time.monotonic() - t0

    def storm_alert() -> list[dict[str, Any]]:
        return [d for d in svc.decisions() if d["action"] == "alert" and d["code"] == "storm"]

    alerts = wait(storm_alert, DRAIN_TIMEOUT_S, "a storm alert decision", interval=1.0)
    seen = time.monotonic() - t0
    time.sleep(2 * monitoring.SCRAPE_INTERVAL_S)  # two more scrapes, and the passes after them
    _passes(svc, 2, 60)
    drains = _health_drains(rig)
    last: dict[str, dict[str, Any]] = {}
    for d in svc.decisions():
        if d["node"] in faulted:
            last[d["node"]] = d
    am = _alertmanager_active(rig, "OpsctlRemediationStorm")
    problems = []
    if len(drains) > cap:
        problems.append(f"{len(drains)} drained, cap {cap}: {', '.join(sorted(drains))}")
    if set(drains) - set(faulted):
        problems.append(f"healthy nodes drained: {', '.join(sorted(set(drains) - set(faulted)))}")
    unexplained = [n for n in faulted if n not in drains and not (
        n in last and (last[n]["action"] == "hold" or "storm" in last[n]["why"]))]
    if unexplained:
        problems.append(f"faulted nodes neither drained nor held with a reason: {', '.join(unexplained)}")
    if not am:
        problems.append("OpsctlRemediationStorm not active in Alertmanager")
    whys = sorted({last[n]["why"] for n in faulted if n in last and n not in drains})
    return Outcome(
        "storm", not problems,
        f"{len(faulted)} faulted, {len(drains)} drained (cap {cap}, storm at >= {storm_at}), storm alert "
        f"after {seen:.1f}s, Alertmanager {'firing' if am else 'silent'}",
        {"faulted": len(faulted), "inject_spread_s": round(spread, 2), "drained": sorted(drains),
         "cap": cap, "storm_at": storm_at, "storm_alert_after_s": round(seen, 1),
         "storm_alert": alerts[0]["why"], "held_why": whys, "alertmanager_storm": bool(am)},
        problems)


def _health_cli(rig: Rig) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "opsctl", "--config", str(rig.sim.config_path), "health",
                           "--json"], env=rig.env, capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def scenario_prometheus_down(rig: Rig, svc: Service, opts: Options) -> Outcome:
    info = rig.sim.procs.info(monitoring.PROMETHEUS_PROC)
    mon = monitoring.load_info(rig.sim)
    assert info is not None and mon is not None
    problems = []
    rig.sim.stop_process(monitoring.PROMETHEUS_PROC)
    t_stop = time.time()
    rc_down, err_down = _health_cli(rig)
    if rc_down != 3:
        problems.append(f"`opsctl health` exited {rc_down} with Prometheus down ({err_down!r}), not 3")
    failed_pass = False
    drained_during: set[str] = set()
    while time.time() - t_stop < opts.prom_down_s:
        drained_during |= set(_health_drains(rig))
        st = svc.status()
        if st is not None and st["time"] > t_stop and not st["ok"]:
            failed_pass = True
        time.sleep(2)
    if not failed_pass:
        problems.append("no failed pass recorded while Prometheus was down")
    rig.sim.spawn(monitoring.PROMETHEUS_PROC, info.argv)  # same config and data directory
    t_back = time.time()
    monitoring.MonitoringAddon.wait_targets_up(rig.sim, mon.prometheus_url, rig.sim.node_names, 180)
    wait(lambda: svc.healthy_pass(t_back), 180, "a pass judging every node OK after Prometheus is back")
    back_s = time.time() - t_back
    _passes(svc, 3, 60)
    rc_back, err_back = _health_cli(rig)
    if rc_back != 0:
        problems.append(f"`opsctl health` exited {rc_back} after Prometheus came back ({err_back!r})")
    drained_during |= set(_health_drains(rig))
    if drained_during:
        problems.append(f"drained: {', '.join(sorted(drained_during))}")
    st = svc.status() or {}
    return Outcome(
        "prometheus-down", not problems,
        f"down {opts.prom_down_s:.0f}s: health exit {rc_down}, {st.get('errors', '?')} failed passes, "
        f"all OK {back_s:.1f}s after restart, {len(drained_during)} drained",
        {"prom_down_s": opts.prom_down_s, "health_exit_down": rc_down, "health_stderr_down": err_down,
         "failed_passes": st.get("errors"), "ok_after_restart_s": round(back_s, 1),
         "health_exit_after": rc_back, "drained": sorted(drained_during)},
        problems)


def scenario_flapping(rig: Rig, svc: Service, opts: Options) -> Outcome:
    node = rig.sim.node_names[-2]
    fault = "thermal,gpu=2"
    problems = []
    resumed_mid_flap: list[float] = []
    t0 = time.monotonic()

    def watch(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if _applied(svc, "resume", node):
                resumed_mid_flap.append(round(time.monotonic() - t0, 1))
                return
            time.sleep(0.5)

    monitoring.inject(rig.sim, node, fault)
    wait(lambda: node in _health_drains(rig), DRAIN_TIMEOUT_S, f"{node} drained", interval=0.2)
    drained_s = time.monotonic() - t0
    for i in range(opts.flaps):
        if i:
            monitoring.inject(rig.sim, node, fault)
        watch(opts.flap_fault_s)
        monitoring.heal(rig.sim, node)
        watch(opts.flap_clean_s)
        if resumed_mid_flap:
            break
    if resumed_mid_flap:
        monitoring.heal(rig.sim, node)
        problems.append(f"resumed while flapping, {resumed_mid_flap[0]}s in")
    t_stable = time.monotonic()
    wait(lambda: _applied(svc, "resume", node), DRAIN_TIMEOUT_S, f"{node} resumed once stable", interval=0.5)
    resumed_s = time.monotonic() - t_stable
    time.sleep(monitoring.SCRAPE_INTERVAL_S)
    _passes(svc, 2, 60)
    drains, resumes = _applied(svc, "drain", node), _applied(svc, "resume", node)
    if len(drains) != 1:
        problems.append(f"{len(drains)} drains applied, not 1")
    if len(resumes) != 1:
        problems.append(f"{len(resumes)} resumes applied, not 1")
    if set(_health_drains(rig)):
        problems.append(f"still drained at the end: {', '.join(sorted(_health_drains(rig)))}")
    return Outcome(
        "flapping", not problems,
        f"{node}: drained after {drained_s:.1f}s, {opts.flaps} flaps ({opts.flap_fault_s:.0f}s fault / "
        f"{opts.flap_clean_s:.0f}s clean), {len(drains)} drain(s), resumed {resumed_s:.1f}s after it "
        "stayed clean" + (f", resumed mid-flap at {resumed_mid_flap[0]}s" if resumed_mid_flap else ""),
        {"node": node, "fault": fault, "flaps": opts.flaps, "drains": len(drains), "resumes": len(resumes),
         "inject_to_drain_s": round(drained_s, 2), "stable_to_resume_s": round(resumed_s, 1),
         "resumed_mid_flap_s": resumed_mid_flap},
        problems)


def scenario_slurmctld_restart(rig: Rig, svc: Service, opts: Options) -> Outcome:
    first, second = rig.sim.node_names[4], rig.sim.node_names[9]
    monitoring.inject(rig.sim, first, "xid=79,gpu=1")
    wait(lambda: first in _health_drains(rig), DRAIN_TIMEOUT_S, f"{first} drained", interval=0.2)
    info = rig.sim.procs.info("slurmctld")
    assert info is not None
    rig.sim.stop_process("slurmctld")
    monitoring.inject(rig.sim, second, "xid=79,gpu=3")
    time.sleep(2 * monitoring.SCRAPE_INTERVAL_S)  # the service goes on passing without Slurm
    rig.sim.spawn("slurmctld", info.argv)  # the same slurm.conf and state save location
    t_back = time.monotonic()
    wait(lambda: second in _health_drains(rig), DRAIN_TIMEOUT_S, f"{second} drained after the restart",
         interval=0.5)
    back_s = time.monotonic() - t_back
    time.sleep(monitoring.SCRAPE_INTERVAL_S)
    _passes(svc, 3, 90)
    problems = []
    longest = max(svc.pass_durations(), default=0.0)
    failed = (svc.status() or {}).get("errors", 0)
    per_node = {n: len(_applied(svc, "drain", n)) for n in (first, second)}
    if any(c != 1 for c in per_node.values()):
        problems.append(f"applied drains per node {per_node}, not one each")
    drains = _health_drains(rig)
    if set(drains) != {first, second}:
        problems.append(f"drained after the restart: {sorted(drains)}, not {[first, second]}")
    return Outcome(
        "slurmctld-restart", not problems,
        f"slurmctld down {2 * monitoring.SCRAPE_INTERVAL_S}s (longest pass {longest:.1f}s); {second} drained "
        f"{back_s:.1f}s after the restart; drains per node {per_node}",
        {"first": first, "second": second, "longest_pass_s": longest, "failed_passes": failed,
         "restart_to_drain_s": round(back_s, 1), "drains_per_node": per_node},
        problems)


def _opsctl(rig: Rig, *args: str) -> subprocess.CompletedProcess[str]:
    """An opsctl command as the on-call types it, against the sim's config."""
    return subprocess.run([sys.executable, "-m", "opsctl", "--config", str(rig.sim.config_path), *args],
                          env=rig.env, capture_output=True, text=True, timeout=300, check=False)


def _latches(svc: Service) -> dict[str, dict[str, Any]]:
    """The latches in the service's state file (node -> what the node needs before it may work)."""
    try:
        data = json.loads((svc.dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    latches: dict[str, dict[str, Any]] = data.get("latches", {})
    return latches


def _active_naming(rig: Rig, node: str, severity: str | None = None,
                   since: float = 0.0) -> list[dict[str, Any]]:
    """Alerts active in the sim's Alertmanager whose ``nodes`` label includes ``node`` (and that
    started at ``since`` or later: an earlier scenario's alert stays active for alert_resolve_after)."""
    info = monitoring.load_info(rig.sim)
    if info is None or not info.alertmanager_url:
        return []
    with urllib.request.urlopen(f"{info.alertmanager_url}/api/v2/alerts?active=true", timeout=10) as resp:
        alerts: list[dict[str, Any]] = json.loads(resp.read())
    return [a for a in alerts if node in expand(a["labels"].get("nodes", ""))
            and (severity is None or a["labels"].get("severity") == severity)
            and _started(a) >= since - 1.0]


def _started(alert: dict[str, Any]) -> float:
    """An Alertmanager alert's startsAt (RFC 3339, fractions of any length) as unix seconds."""
    text = re.sub(r"(\.\d{1,6})\d*", r"\1", alert["startsAt"])
    return datetime.fromisoformat(text).timestamp()


def _not_schedulable(rig: Rig, node: str) -> bool:
    """Slurm keeps the node from new jobs: drained or draining (sinfo %T: drained, draining)."""
    return node_state(rig.env, node).rstrip("*~#").startswith(("drain", "down"))


def scenario_rma_backlog(rig: Rig, svc: Service, opts: Options) -> Outcome:
    names = rig.sim.node_names
    rma, node = names[10:10 + RMA_NODES], names[10 + RMA_NODES + 3]
    problems = []
    for i, n in enumerate(rma):  # one by one, as the RMA tickets came in
        done = _opsctl(rig, "drain", n, "--reason", f"RMA 47{i:02d}")
        if done.returncode != 0:
            problems.append(f"`opsctl drain {n}` exited {done.returncode}: {done.stderr.strip()[-200:]}")
    manual = {n: r for n, r in slurm_reasons(rig.env).items() if n in rma}
    t0, t_inject = time.monotonic(), time.time()
    monitoring.inject(rig.sim, node, "xid=79,gpu=4")

    def settled() -> bool:  # drained past the guardrail, or held in service and paged
        return node in slurm_reasons(rig.env) or any(
            d["node"] == node and d["action"] in ("hold", "alert") for d in svc.decisions())

    wait(settled, DRAIN_TIMEOUT_S, f"{node} drained or held", interval=0.5)
    decided_s = time.monotonic() - t0
    time.sleep(monitoring.SCRAPE_INTERVAL_S)
    _passes(svc, 2, 60)
    state = node_state(rig.env, node)
    reason = slurm_reasons(rig.env).get(node, "")
    latch = _latches(svc).get(node)
    pages = _active_naming(rig, node, "page", since=t_inject)  # raised for this fault, not before
    named = _active_naming(rig, node, since=t_inject)
    named_as = sorted({f"{a['labels']['alertname']} ({a['labels']['severity']})" for a in named})
    mine = [d for d in svc.decisions() if d["node"] == node or node in expand(d["node"])]
    last = mine[-1] if mine else {}
    if len(manual) != RMA_NODES or any(not r.startswith("opsctl:manual:") for r in manual.values()):
        problems.append(f"operator drains not all in place: {manual}")
    if not _not_schedulable(rig, node):
        problems.append(f"{node} still takes jobs: Slurm state {state!r}")
    if not latch:
        problems.append(f"{node} not latched in the state file")
    if not pages:
        problems.append(f"no page-severity alert naming {node} active in Alertmanager (active naming it: "
                        f"{', '.join(named_as) or 'none'})")
    others = sorted(set(_health_drains(rig)) - {node})
    if others:
        problems.append(f"other nodes drained by health: {', '.join(others)}")
    for n in rma:  # the parts came back: the operator resumes them
        _opsctl(rig, "resume", n)
    return Outcome(
        "rma-backlog", not problems,
        f"{len(manual)} nodes drained for RMA; {node} ({state}, {reason or 'no reason'}) "
        f"{last.get('action', '?')}/{last.get('result', '?')} after {decided_s:.1f}s, latched "
        f"{(latch or {}).get('action', 'no')}; alerts naming it: {', '.join(named_as) or 'none'}",
        {"rma": rma, "node": node, "slurm_state": state, "reason": reason, "decided_s": round(decided_s, 1),
         "decision": {k: last.get(k) for k in ("action", "result", "allowance", "why")},
         "latch": latch, "alerts": named_as},
        problems)


def scenario_false_storm_plus_xid(rig: Rig, svc: Service, opts: Options) -> Outcome:
    names = rig.sim.node_names
    node = names[len(names) // 3]
    t0 = time.monotonic()
    for n in names:  # a fleet-wide false FAIL: every node's first port reads Down (a bad rollout)
        monitoring.inject(rig.sim, n, opts.storm_fault)
    monitoring.inject(rig.sim, node, "xid=79,gpu=6")
    spread = time.monotonic() - t0

    def storms() -> list[dict[str, Any]]:
        return [d for d in svc.decisions() if d["action"] == "alert" and d["code"] == "storm"]

    wait(lambda: node in slurm_reasons(rig.env) and storms(), DRAIN_TIMEOUT_S,
         f"{node} drained and a storm alert decision", interval=0.5)
    seen = time.monotonic() - t0
    time.sleep(2 * monitoring.SCRAPE_INTERVAL_S)
    _passes(svc, 2, 60)
    drains = _health_drains(rig)
    reasons = slurm_reasons(rig.env)
    am = _alertmanager_active(rig, "OpsctlRemediationStorm")
    sigs = sorted({d["signature"] for d in storms()})
    am_sigs = sorted({a["annotations"].get("summary", "").split(" on ", 1)[0].removeprefix("storm: ")
                      for a in am})
    problems = []
    if not drains.get(node, "").startswith(HEALTH_PREFIX + "gpu-xid"):
        problems.append(f"{node}'s reason is {reasons.get(node)!r}, not {HEALTH_PREFIX}gpu-xid:...")
    others = sorted(set(reasons) - {node})
    if others:
        problems.append(f"other nodes drained: {', '.join(f'{n} ({reasons[n]})' for n in others)}")
    if not am:
        problems.append("OpsctlRemediationStorm not active in Alertmanager")
    if am_sigs != [opts.storm_signature]:
        problems.append(f"storm alerts in Alertmanager name {am_sigs}, not only [{opts.storm_signature!r}]")
    return Outcome(
        "false-storm-plus-xid", not problems,
        f"{opts.storm_fault} on {len(names)} nodes + XID 79 on {node}: {node} "
        f"{'drained (' + drains[node] + ')' if node in drains else 'not drained'} {seen:.1f}s after "
        f"injection, {len(others)} other(s) drained; storm signatures {sigs}; Alertmanager storm alerts "
        f"{am_sigs}",
        {"node": node, "fault": opts.storm_fault, "inject_spread_s": round(spread, 2),
         "drained_after_s": round(seen, 1), "reason": reasons.get(node, ""), "others_drained": others,
         "storm_signatures": sigs, "alertmanager_storms": am_sigs},
        problems)


def scenario_prometheus_gap(rig: Rig, svc: Service, opts: Options) -> Outcome:
    node = rig.sim.node_names[len(rig.sim.node_names) // 4]
    info = rig.sim.procs.info(monitoring.PROMETHEUS_PROC)
    mon = monitoring.load_info(rig.sim)
    assert info is not None and mon is not None
    window_s = monitoring.XID_WINDOW_MS / 1000.0  # the exporter's window, as the rig runs it
    problems = []
    rig.sim.stop_process(monitoring.PROMETHEUS_PROC)
    t_stop = time.time()
    time.sleep(opts.gap_xid_after_s)
    monitoring.inject(rig.sim, node, "xid=79,gpu=1")  # counted by the exporter, never scraped
    t_xid = time.time()
    drained_during: set[str] = set()
    page_after: float | None = None
    while time.time() - t_stop < opts.gap_s:
        drained_during |= set(slurm_reasons(rig.env))
        if page_after is None and _alertmanager_active(rig, "OpsctlEvidenceSourceLost"):
            page_after = time.time() - t_stop
        time.sleep(2)
    if page_after is None:
        problems.append(f"no OpsctlEvidenceSourceLost active within {opts.gap_s:.0f}s of Prometheus down")
    if drained_during:
        problems.append(f"drained while Prometheus was down: {', '.join(sorted(drained_during))}")
    aged = time.time() - t_xid
    rig.sim.spawn(monitoring.PROMETHEUS_PROC, info.argv)  # same config and data directory
    t_back = time.time()
    monitoring.MonitoringAddon.wait_targets_up(rig.sim, mon.prometheus_url, rig.sim.node_names, 180)
    wait(lambda: svc.pass_after(t_back), 180, "a pass after Prometheus is back")

    def outcome() -> bool:  # drained, or at least paged as a fatal node left in service (not the
        # source-lost page, which names every node)
        return node in slurm_reasons(rig.env) or any(
            a["labels"]["alertname"] == "OpsctlFatalNodeInService"
            for a in _active_naming(rig, node, since=t_stop))

    try:
        wait(outcome, opts.gap_judge_s, f"{node} drained or paged after Prometheus is back", interval=1.0)
    except SystemExit as exc:
        problems.append(str(exc))
    back_s = time.time() - t_back
    time.sleep(monitoring.SCRAPE_INTERVAL_S)
    _passes(svc, 2, 60)
    reasons = slurm_reasons(rig.env)
    verdicts = _node_verdicts(rig, node)
    if not reasons.get(node, "").startswith(HEALTH_PREFIX):
        problems.append(f"{node} (XID 79 {aged:.0f}s before Prometheus came back, window {window_s:.0f}s) "
                        f"not drained: Slurm reason {reasons.get(node)!r}; `opsctl health` says {verdicts}")
    others = sorted(set(reasons) - {node})
    if others:
        problems.append(f"other nodes drained: {', '.join(others)}")
    return Outcome(
        "prometheus-gap", not problems,
        f"Prometheus down {opts.gap_s:.0f}s, XID 79 on {node} {opts.gap_xid_after_s:.0f}s in (out of the "
        f"{window_s:.0f}s exporter window {aged:.0f}s later); page "
        + (f"after {page_after:.0f}s" if page_after is not None else "never")
        + f", {len(drained_during)} drained while down; after the restart {node} "
        + (f"drained ({reasons[node]}) {back_s:.1f}s later" if node in reasons
           else f"NOT drained: {verdicts}"),
        {"node": node, "gap_s": opts.gap_s, "xid_age_at_restart_s": round(aged, 1),
         "exporter_xid_window_s": window_s, "source_lost_page_after_s": page_after,
         "drained_while_down": sorted(drained_during), "reason": reasons.get(node, ""),
         "restart_to_outcome_s": round(back_s, 1), "verdicts": verdicts, "others_drained": others},
        problems)


def _node_verdicts(rig: Rig, node: str) -> list[str]:
    """`opsctl health NODE --all --json`: every non-OK verdict of that node, as "code STATUS summary"."""
    done = _opsctl(rig, "health", node, "--all", "--json")
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        return [f"health exit {done.returncode}: {done.stderr.strip()[-200:]}"]
    out = []
    for n in doc.get("nodes", []):
        for v in n.get("verdicts", []):
            if v.get("status") != "OK":
                out.append(f"{v.get('code')} {v.get('status')} {v.get('summary', '')}"[:200])
    return out or ["all OK"]


def scenario_clock_step(rig: Rig, svc: Service, opts: Options) -> Outcome:
    node = rig.sim.node_names[7]
    problems = []
    monitoring.inject(rig.sim, node, "xid=79,gpu=0")
    wait(lambda: node in _health_drains(rig), DRAIN_TIMEOUT_S, f"{node} drained", interval=0.2)
    latch = _latches(svc).get(node, {})
    if latch.get("action") != "reboot":
        problems.append(f"{node}'s latch is {latch}, not reboot")
    t_step = time.time()
    # by default past the node's uptime: its boot time then moves past the XID, which reads as one
    # of an earlier boot, so the node looks clean and only the latch's kernel boot id holds it
    hw = load_hw(state_path(monitoring.hw_dir(rig.sim), node))
    step = opts.clock_step_s or math.ceil(t_step - hw.boot_time) + 120
    monitoring.inject(rig.sim, node, f"clock_step={step:g}")  # same boot, same boot id
    # long enough for resume_after_clean fresh clean scrapes, were the step taken for a reboot
    time.sleep(opts.clock_watch_s)
    _passes(svc, 2, 60)
    after_step = [d for d in svc.decisions() if d["node"] == node and d["time"] > t_step]
    keep_why = sorted({re.sub(r"\d+/", "N/", d["why"]) for d in after_step if d["action"] == "keep"})
    clean_after_step = [d for d in after_step if d["action"] == "keep" and d["why"].startswith("clean ")]
    if not clean_after_step:
        problems.append(f"{node} never looked clean after the {step:+g}s step: the latch went untested")
    resumed_on_step = _applied(svc, "resume", node)
    latch_after = _latches(svc).get(node)
    if resumed_on_step:
        problems.append(f"resumed after a clock step of {step:+g}s (no reboot)")
    if node not in _health_drains(rig):
        problems.append(f"{node} not drained after the clock step: {slurm_reasons(rig.env).get(node)!r}")
    if not latch_after:
        problems.append(f"{node}'s latch released by the clock step")
    t_boot = time.monotonic()
    monitoring.inject(rig.sim, node, "reboot")  # a real reboot: a new kernel boot id
    try:
        wait(lambda: _applied(svc, "resume", node), DRAIN_TIMEOUT_S, f"{node} resumed after the reboot",
             interval=0.5)
    except SystemExit as exc:
        problems.append(str(exc))
    reboot_s = time.monotonic() - t_boot
    if node in slurm_reasons(rig.env):
        problems.append(f"{node} still drained after the reboot: {slurm_reasons(rig.env)[node]!r}")
    if _latches(svc).get(node):
        problems.append(f"{node} still latched after the reboot")
    return Outcome(
        "clock-step", not problems,
        f"{node} drained (latch {latch.get('action')}); clock stepped {step:+g}s: "
        f"{'resumed' if resumed_on_step else 'kept drained'} for {opts.clock_watch_s:.0f}s "
        f"({'; '.join(keep_why) or 'no keep decision'}); after a reboot resumed in {reboot_s:.1f}s",
        {"node": node, "clock_step_s": step, "latch": latch, "keep_why_after_step": keep_why,
         "clean_passes_after_step": len(clean_after_step),
         "resumed_on_step": bool(resumed_on_step), "reboot_to_resume_s": round(reboot_s, 1)},
        problems)


SCENARIOS: dict[str, Callable[[Rig, Service, Options], Outcome]] = {
    "xid79": scenario_xid79,
    "storm": scenario_storm,
    "prometheus-down": scenario_prometheus_down,
    "flapping": scenario_flapping,
    "slurmctld-restart": scenario_slurmctld_restart,
    "rma-backlog": scenario_rma_backlog,
    "clock-step": scenario_clock_step,
    "prometheus-gap": scenario_prometheus_gap,
    # last by default: the fleet's ib-errors (link_downed grew) FAIL for the counter window after it
    "false-storm-plus-xid": scenario_false_storm_plus_xid,
}


def _reset(rig: Rig, settle: bool = True) -> None:
    """Heal every node and resume every drain, as the on-call would after the drill; with ``settle``,
    wait until `opsctl health` reads every node healthy (for the next scenario)."""
    from opsctl.health import service

    for node in rig.sim.node_names:
        monitoring.heal(rig.sim, node)
    resume(rig.env, sorted(slurm_reasons(rig.env)))
    rig.sim.wait_nodes_idle(rig.sim.node_names, 120)
    if not settle:
        return
    # Prometheus must have scraped the healed hardware before the next scenario's service starts, or
    # its first pass would drain a node of the last drill (its fresh state file has no latch for it).
    # A counter that grew (an InfiniBand port that went down: link_downed) fails ib-errors for the
    # counter window ([health] window_seconds) after the heal, so wait up to that long.
    window = service.load_context(str(rig.sim.config_path)).health.window_seconds
    wait(lambda: _health_cli(rig)[0] == 0, window + 120, "`opsctl health` exit 0 after the reset",
         interval=5.0)


def run(names: list[str], nodes: int, opts: Options, keep: bool) -> list[Outcome]:
    register_addon(ADDON, lambda: monitoring.MonitoringAddon(alertmanager=True))
    rig = Rig.up(nodes, ADDON, prefix="reh")
    outcomes: list[Outcome] = []
    failed = False
    try:
        am = monitoring.load_info(rig.sim)
        for name in names:
            svc = rig.service(name)
            # the product's defaults for everything a scenario tests; only files and ports are the rig's
            svc.configure(opts.interval)
            rig.sim.set_config("remediator", alertmanager_url=am.alertmanager_url if am else "")
            svc.start()
            try:
                wait(svc.healthy_pass, 180, f"{name}: a healthy pass of the service before the drill")
                t0 = time.monotonic()
                out = SCENARIOS[name](rig, svc, opts)
                out.values["wall_s"] = round(time.monotonic() - t0, 1)
            except SystemExit as exc:  # a wait that ran out: this scenario failed, the others still run
                out = Outcome(name, False, str(exc), problems=[str(exc)])
            finally:
                svc.stop()
            failed |= not out.ok
            outcomes.append(out)
            _reset(rig, settle=name != names[-1])  # nothing runs after the last
    finally:
        rig.down(keep or failed)
    return outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                    help=f"default: all of {', '.join(SCENARIOS)}")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--interval", type=float, default=2.0,
                    help="[remediator] interval (2 s: the sim scrapes every 5 s; the product default is 15)")
    ap.add_argument("--prom-down-s", type=float, default=120.0, help="how long Prometheus stays down")
    ap.add_argument("--flaps", type=int, default=4)
    ap.add_argument("--flap-fault-s", type=float, default=10.0)
    ap.add_argument("--flap-clean-s", type=float, default=4.0,
                    help="each clean spell (shorter than the 5 s scrape: at most one clean sample)")
    ap.add_argument("--storm-fault", default="ib_down=mlx5_0",
                    help="false-storm-plus-xid: the fault injected on every node (a false fleet-wide FAIL)")
    ap.add_argument("--storm-signature", default="ib-port",
                    help="false-storm-plus-xid: the only storm signature Alertmanager may show for it")
    ap.add_argument("--gap-s", type=float, default=360.0,
                    help="prometheus-gap: how long Prometheus stays down (past the exporter's 300 s XID "
                    "window and [health] unknown_alert_after, 300 s)")
    ap.add_argument("--gap-xid-after-s", type=float, default=5.0,
                    help="prometheus-gap: the XID is raised this long after Prometheus stops")
    ap.add_argument("--gap-judge-s", type=float, default=180.0,
                    help="prometheus-gap: how long after the restart the XID node may take to be drained")
    ap.add_argument("--clock-step-s", type=float, default=0.0,
                    help="clock-step: the step of the latched node's wall clock (its boot time moves by it); "
                    "0: its uptime plus 120 s, so the XID reads as one of an earlier boot")
    ap.add_argument("--clock-watch-s", type=float, default=45.0,
                    help="clock-step: how long the stepped node is watched for a wrong resume")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    ap.add_argument("--keep", action="store_true", help="keep the sim's directory (logs, decisions)")
    args = ap.parse_args()
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    if args.nodes < STORM_NODES + 2 and (not args.scenarios or "storm" in args.scenarios):
        ap.error(f"storm needs --nodes >= {STORM_NODES + 2}")
    if args.gap_s - args.gap_xid_after_s <= monitoring.XID_WINDOW_MS / 1000.0 and (
            not args.scenarios or "prometheus-gap" in args.scenarios):
        ap.error(f"prometheus-gap needs --gap-s - --gap-xid-after-s > the exporter's XID window "
                 f"({monitoring.XID_WINDOW_MS / 1000.0:.0f}s)")
    opts = Options(args.interval, args.prom_down_s, args.flaps, args.flap_fault_s, args.flap_clean_s,
                   args.storm_fault, args.storm_signature, args.gap_s, args.gap_xid_after_s, args.gap_judge_s,
                   args.clock_step_s, args.clock_watch_s)
    outcomes = run(args.scenarios or list(SCENARIOS), args.nodes, opts, args.keep)
    if args.json:
        print(json.dumps({"nodes": args.nodes, "interval_s": args.interval,
                          "ok": all(o.ok for o in outcomes), "scenarios": [asdict(o) for o in outcomes]},
                         sort_keys=True))
    else:
        for o in outcomes:
            print(f"{'PASS' if o.ok else 'FAIL'} {o.scenario}: {o.summary}"
                  + "".join(f"\n  - {p}" for p in o.problems))
    sys.exit(0 if all(o.ok for o in outcomes) else 1)


if __name__ == "__main__":
    main()
