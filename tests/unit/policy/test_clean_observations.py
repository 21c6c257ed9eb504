"""Resume counts clean observations, not clean passes: the service passes every few seconds, faster
than Prometheus scrapes, so several passes re-read one scrape (bench/rehearsal.py 'flapping')."""

from __future__ import annotations

import json

from test_latching import failing, run
from test_policy import NOW, RecordingSlurm, actions, cluster, ok, reports

from opsctl.checks import judge, load_thresholds
from opsctl.checks.model import Status
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.evidence.composite import merge_evidence
from opsctl.evidence.model import Evidence
from opsctl.evidence.prometheus import build_evidence
from opsctl.remediation.state import PolicyState

NODE = "gpu-003"
SCRAPE = 5.0  # the sim's scrape interval; the passes below come every 2 s, as in the rehearsal


def seen(report: NodeReport, at: float | None) -> NodeReport:
    report.observed_at = at
    return report


def clean(at: float | None) -> NodeReport:
    return seen(ok(NODE), at)


def bad(at: float | None) -> NodeReport:
    # a fault that needs no proof to resume: only the clean streak stands between it and a resume
    return seen(failing(NODE, action="none"), at)


def drained(cfg: PolicyConfig, at: float = NOW):
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    run(nodes, reports(nodes, {NODE: bad(at)}), state, cfg, at, slurm)
    assert nodes[NODE].drain_flag and state.latch(NODE) is not None
    return nodes, slurm, state


def test_clean_passes_that_reread_one_scrape_count_once():
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    scrape = NOW + SCRAPE
    for t in (1.0, 3.0, 5.0):  # three passes, one clean scrape
        ds = run(nodes, reports(nodes, {NODE: clean(scrape)}), state, cfg, scrape + t, slurm)
        assert actions(ds, "resume") == []
    (d,) = [d for d in ds if d.node == NODE]
    assert d.action == "keep" and "1/3" in d.why and "no new evidence" in d.why
    assert state.clean_streak[NODE] == 1 and state.clean_seen[NODE] == scrape
    ds = run(nodes, reports(nodes, {NODE: clean(scrape + SCRAPE)}), state, cfg, scrape + 7, slurm)
    assert actions(ds, "resume") == [] and state.clean_streak[NODE] == 2
    ds = run(nodes, reports(nodes, {NODE: clean(scrape + 2 * SCRAPE)}), state, cfg, scrape + 11, slurm)
    assert actions(ds, "resume") == [NODE]  # the third clean scrape
    assert [c[0] for c in slurm.calls] == ["drain", "resume"]
    assert state.clean_streak == {} and state.clean_seen == {} and state.latches == {}


def test_a_fault_back_after_one_clean_scrape_is_not_a_repeat_drain():
    """The rehearsal's flapping: faulty, clean for one scrape (read by three passes), faulty again.
    The node must stay in its first drain: no resume, no second drain, no escalation page."""
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    for t in (5.0, 7.0, 9.0):
        run(nodes, reports(nodes, {NODE: clean(NOW + SCRAPE)}), state, cfg, NOW + t, slurm)
    ds = run(nodes, reports(nodes, {NODE: bad(NOW + 2 * SCRAPE)}), state, cfg, NOW + 11, slurm)
    (d,) = [d for d in ds if d.node == NODE]
    assert d.action == "keep" and "still failing" in d.why
    assert actions(ds, "alert") == [] and [c[0] for c in slurm.calls] == ["drain"]
    assert NODE not in state.clean_streak and NODE not in state.clean_seen


def test_a_streak_broken_by_unknown_starts_over_on_new_scrapes():
    cfg = PolicyConfig(resume_after_clean=2, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    run(nodes, reports(nodes, {NODE: clean(NOW + 5)}), state, cfg, NOW + 6, slurm)
    unknown = seen(NodeReport(NODE, Status.UNKNOWN, []), None)
    run(nodes, reports(nodes, {NODE: unknown}), state, cfg, NOW + 8, slurm)
    assert NODE not in state.clean_streak and NODE not in state.clean_seen
    ds = run(nodes, reports(nodes, {NODE: clean(NOW + 10)}), state, cfg, NOW + 11, slurm)
    assert actions(ds, "resume") == []
    ds = run(nodes, reports(nodes, {NODE: clean(NOW + 10)}), state, cfg, NOW + 13, slurm)
    assert actions(ds, "resume") == []
    ds = run(nodes, reports(nodes, {NODE: clean(NOW + 15)}), state, cfg, NOW + 16, slurm)
    assert actions(ds, "resume") == [NODE]


def test_direct_sources_observe_at_every_pass():
    """SSH and DCGM read the node on each pass: each pass is new evidence, as before."""
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    th = load_thresholds()
    for i in (1, 2, 3):
        t = NOW + 2 * i
        (report,) = judge([Evidence(NODE, "ssh", t)], th, t)
        assert report.observed_at == t
        ds = run(nodes, reports(nodes, {NODE: report}), state, cfg, t, slurm)
    assert actions(ds, "resume") == [NODE]


def test_reports_without_an_observation_time_count_every_pass():
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    for i in (1, 2, 3):
        ds = run(nodes, reports(nodes, {NODE: clean(None)}), state, cfg, NOW + 2 * i, slurm)
    assert actions(ds, "resume") == [NODE]


def test_state_file_of_an_earlier_version_keeps_its_streak(tmp_path):
    """No ``clean_seen``: the latch's next clean pass counts, as it used to; from then on the
    observation time is recorded and saved."""
    cfg = PolicyConfig(resume_after_clean=3, confirm_after=0)
    nodes, slurm, state = drained(cfg)
    old = json.loads(json.dumps({k: v for k, v in vars(state).items() if k != "clean_seen"}))
    old["clean_streak"] = {NODE: 1}
    path = tmp_path / "state.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    state = PolicyState.load(path)
    assert state.clean_seen == {} and state.latch(NODE) is not None
    run(nodes, reports(nodes, {NODE: clean(NOW + 5)}), state, cfg, NOW + 6, slurm)
    assert state.clean_streak[NODE] == 2
    state.save(path)
    state = PolicyState.load(path)
    assert state.clean_seen == {NODE: NOW + 5}
    ds = run(nodes, reports(nodes, {NODE: clean(NOW + 5)}), state, cfg, NOW + 8, slurm)
    assert actions(ds, "resume") == []
    ds = run(nodes, reports(nodes, {NODE: clean(NOW + 10)}), state, cfg, NOW + 11, slurm)
    assert actions(ds, "resume") == [NODE]


def _fresh(node: str, gpus: int, scrape: float, now: float) -> dict[str, list[dict[str, object]]]:
    """The answer to build_evidence's freshness query: timestamp() of each GPU's temperature."""
    return {
        "fresh": [
            {"metric": {"node": node, "gpu": str(g), "UUID": f"GPU-{g:08d}"}, "value": [now, str(scrape)]}
            for g in range(gpus)
        ]
    }


def test_prometheus_evidence_is_observed_at_its_scrape():
    scrape = NOW - 3
    (ev,) = build_evidence([NODE], _fresh(NODE, 8, scrape, NOW), NOW, 60, 300)
    assert ev.reachable and ev.collected_at == NOW and ev.observed_at == scrape
    # two passes 2 s apart that read the same scrape are the same observation
    (again,) = build_evidence([NODE], _fresh(NODE, 8, scrape, NOW + 2), NOW + 2, 60, 300)
    th = load_thresholds()
    (r1,), (r2,) = judge([ev], th, NOW), judge([again], th, NOW + 2)
    assert r1.observed_at == r2.observed_at == scrape
    # prometheus+ssh: the SSH half is new every pass, the merge is as new as its oldest half
    ssh = Evidence(NODE, "ssh", NOW + 2)
    (merged,) = merge_evidence([NODE], ["prometheus", "ssh"], [{NODE: again}, {NODE: ssh}], NOW + 2, "p+s")
    assert merged.observed_at == scrape
