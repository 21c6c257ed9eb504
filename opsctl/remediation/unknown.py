"""What remediation does with what it cannot see: probes that keep timing out (``probe-hung``), a
required family one node lacks while others have it (``evidence-lost``), nodes UNKNOWN too long
(their alert; every node at once is the source lost) and a source that cannot see what remediation
needs (the refusal). Pure, on the state's clocks and streaks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opsctl.checks.coverage import coverage
from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.evidence.model import Evidence
from opsctl.nodeset import fold
from opsctl.remediation.policy import Decision
from opsctl.remediation.state import PolicyState


def probe_verdicts(report: NodeReport, state: PolicyState, cfg: PolicyConfig, count: bool) -> None:
    """Probes that timed out ``probe_hung_passes`` passes in a row FAIL as ``probe-hung`` (a hung
    mount or nvidia-smi is UNKNOWN in one pass, a failure when it never answers). ``count`` adds
    this pass to the streaks; without it the streaks are only read."""
    seen = state.probe_timeouts.get(report.node, {})
    if count:
        if report.status is Status.UNKNOWN and not report.probe_timeouts and report.verdicts and all(
            v.code == "evidence" for v in report.verdicts
        ):
            return  # the node could not be read at all: no probe ran, the streaks stand
        seen = {p: seen.get(p, 0) + 1 for p in report.probe_timeouts}
        if seen:
            state.probe_timeouts[report.node] = seen
        else:
            state.probe_timeouts.pop(report.node, None)
    else:
        seen = {p: seen.get(p, 0) + 1 for p in report.probe_timeouts}
    hung = sorted(p for p, n in seen.items() if n >= cfg.probe_hung_passes)
    for probe in hung:
        report.verdicts.append(
            Verdict(
                "probe-hung",
                Status.FAIL,
                report.node,
                None,
                f"{probe} timed out {seen[probe]} passes in a row",
                # a driver call that never returns needs a reboot; a mount clears when its server does
                {"short": f"{probe} hung", "probe": probe, "passes": seen[probe],
                 "action": "reboot" if probe == "nvidia-smi" else "none"},
            )
        )
    if hung:
        report.status = Status.FAIL


def lacking_since(state: PolicyState, node: str, families: Sequence[str], now: float) -> dict[str, float]:
    """When ``node`` was first seen lacking each of ``families`` (the ones it lacks now; ``now`` for a
    new one): a family that came back in between restarted its clock."""
    had = state.unknown_since.get(node, {})
    return {f: float(had.get(f, now)) for f in sorted(families)}


def evidence_lost_verdict(node: str, since: Mapping[str, float], cfg: PolicyConfig,
                          now: float) -> Verdict | None:
    """FAIL ``evidence-lost`` for the families ``node`` has lacked for ``unknown_fail_after`` while
    other nodes had them; None while none has. It latches reboot: resumed once a new boot shows
    full, clean evidence (or by a person)."""
    lost = sorted(f for f, t in since.items() if now - t >= cfg.unknown_fail_after)
    if not lost:
        return None
    first = min(since[f] for f in lost)
    return Verdict(
        "evidence-lost", Status.FAIL, node, None,
        f"no evidence for {', '.join(lost)} for {now - first:.0f}s while other nodes have it "
        f"([health] unknown_fail_after {cfg.unknown_fail_after:.0f}s)",
        {"short": f"no {'+'.join(lost)} for {now - first:.0f}s", "families": lost, "since": first,
         "action": "reboot"},
    )


def track_node_unknown(reports: Sequence[NodeReport], state: PolicyState, now: float) -> None:
    """Start (or keep) the UNKNOWN clock of each UNKNOWN report's node; stop the others'."""
    for r in reports:
        if r.status is Status.UNKNOWN:
            state.unknown_node_since.setdefault(r.node, now)
        else:
            state.unknown_node_since.pop(r.node, None)


def unknown_alerts(reports: Sequence[NodeReport], state: PolicyState, cfg: PolicyConfig,
                   now: float) -> list[Decision]:
    """The alert for nodes UNKNOWN for ``unknown_alert_after`` or more: every node of the pass at
    once is the source lost (one page for the fleet, never a drain); some nodes, a ticket naming
    them."""
    ages = {r.node: now - state.unknown_node_since.get(r.node, now)
            for r in reports if r.status is Status.UNKNOWN}
    over = sorted(n for n, age in ages.items() if age >= cfg.unknown_alert_after)
    if not over:
        return []
    if len(ages) == len(reports):
        if len(over) < len(reports):
            return []  # the fleet went dark less than unknown_alert_after ago
        return [source_lost_alert(over, min(ages.values()), "no node has evidence")]
    return [Decision(fold(over), "alert", code="unknown",
                     why=f"UNKNOWN for {max(ages[n] for n in over):.0f}s or less (over [health] "
                     f"unknown_alert_after {cfg.unknown_alert_after:.0f}s): not judged, not drained "
                     "unless a required family is lost (evidence-lost)")]


def source_lost_alert(nodes: Sequence[str], seconds: float, what: str) -> Decision:
    """The one page for a source lost on every node: nothing can be judged, nothing is drained."""
    return Decision(fold(list(nodes)), "alert", code="source-lost",
                    why=f"evidence source lost on every node for {seconds:.0f}s ({what}): nothing is "
                    "judged or drained until it is back")


def judge_unknown(reports: Sequence[NodeReport], lacking: Mapping[str, Sequence[str]], state: PolicyState,
                  cfg: PolicyConfig, now: float, count: bool) -> list[Decision]:
    """End UNKNOWN. ``lacking``: node -> the required checks it has no evidence for while other nodes
    do (coverage's ``nodes_lacking_required``; a family no node has is not there, so a source lost
    everywhere never counts). Each lacked past ``unknown_fail_after`` adds FAIL ``evidence-lost`` to
    the node's report; returns the unknown alerts. ``count`` keeps the clocks in ``state``; without
    it they are only read (a plain pass shows what the service's clocks say) and no alert is made."""
    for r in reports:
        since = lacking_since(state, r.node, lacking.get(r.node, ()), now)
        if count:
            if since:
                state.unknown_since[r.node] = since
            else:
                state.unknown_since.pop(r.node, None)
        lost = evidence_lost_verdict(r.node, since, cfg, now)
        if lost is not None:
            r.verdicts.append(lost)
            r.status = Status.FAIL
    if not count:
        return []
    track_node_unknown(reports, state, now)
    return unknown_alerts(reports, state, cfg, now)


def judge_on_state(reports: Sequence[NodeReport], lacking: Mapping[str, Sequence[str]], state: PolicyState,
                   cfg: PolicyConfig, now: float, count: bool) -> list[Decision]:
    """What the reports alone cannot say: probes hung for passes in a row (``probe_verdicts``) and
    evidence lost for too long (``judge_unknown``), added to the reports; the unknown alerts.
    ``count`` keeps the streaks and clocks (a remediating pass); without it they are only read."""
    for r in reports:
        probe_verdicts(r, state, cfg, count=count)
    return judge_unknown(reports, lacking, state, cfg, now, count=count)


def remediation_refusal(evidence: Sequence[Evidence], required: Sequence[str]) -> str:
    """Why remediation must not act on this evidence ("" when it may): XIDs known only by their last
    value (a later harmless XID hides a fatal one), or a required check that no node has evidence
    for (the source cannot see that class of fault). With no node readable at all there is nothing
    to act on and nothing to refuse: every node is UNKNOWN."""
    if not any(ev.reachable for ev in evidence):
        return ""
    cov = coverage(evidence, required)
    if cov.last_value_xids:
        return (
            f"XIDs on {fold(cov.xid_modes['last-value'])} are known only by their last value "
            "(DCGM_FI_DEV_XID_ERRORS): a later harmless XID hides a fatal one; enable "
            "DCGM_EXP_XID_ERRORS_COUNT in the dcgm-exporter counters"
        )
    if cov.missing_required:
        return (
            f"no evidence for required check(s) {', '.join(cov.missing_required)} from this source "
            "([health] required_checks; opsctl health --coverage lists what it can see)"
        )
    return ""


def lacking_required(evidence: Sequence[Evidence], required: Sequence[str]) -> dict[str, list[str]]:
    """Node -> the required checks it has no evidence for while other nodes do (evidence-lost's
    clocks); a check no node has evidence for is not in it (the source, not the node)."""
    if not any(ev.reachable for ev in evidence):
        return {}
    return coverage(evidence, required).nodes_lacking_required
