"""Remediation on the simulated cluster: 8 real slurmd, real slurmctld, emulated exporters
scraped every 5 s by a real Prometheus; faults injected into the simulated hardware."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from promlab import heal_all, rescraped, wait_until

from opsctl.health import service
from opsctl.sim import monitoring
from opsctl.sim.addons import register_addon
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration  # about 50 s on 2 cores

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "prometheus")
ADDON = "monitoring-dcgm45"


@pytest.fixture(scope="module")
def sim():
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="hlth", dir="/tmp"))
    # the dcgm role's counters for DCGM 4.5: the recovery action tells a reset-class drain when the
    # GPU reset has happened (the pinned DCGM 3 does not export it)
    register_addon(ADDON, lambda: monitoring.MonitoringAddon(dcgm_version="4.5.3"))
    cluster = SimCluster(nodes=8, state_dir=state_dir, addons=[ADDON])
    try:
        cluster.up()
        yield cluster
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture
def cfg(sim, tmp_path):
    """The sim's opsctl.toml with [health] settings and a fresh state file for this test."""
    sim.set_config("health", stale_after=15.0, window_seconds=60, resume_after_clean=2,
                   state_file=str(tmp_path / "state.json"), decision_log=str(tmp_path / "decisions.jsonl"))
    path = sim.config_path
    # start from a cluster that looks healthy: the previous test's nodes healed and scraped since
    since = HEALED.get(str(sim.state_dir))
    wait_until(lambda: rescraped(sim, since)
               and set(statuses(health_pass(path, remediate=False)).values()) == {"OK"}, timeout=60)
    yield path
    HEALED[str(sim.state_dir)] = heal_all(sim)
    sim.reset()


HEALED: dict[str, float] = {}  # the module's sim -> when the last test's teardown healed its nodes


# XID 79 and the node reboot the driver then asks for (field 1523, which DCGM 4.5's exporter serves)
# arrive in one scrape; a pass whose concurrent queries straddle that scrape sees one before the
# other and drains for it. Either latches reboot.
XID79_GPU5 = ("opsctl:health:gpu-xid:xid 79 gpu 5", "opsctl:health:gpu-recovery:needs reboot gpu 5")


def health_pass(cfg: Path, remediate: bool = True) -> service.HealthResult:
    ctx = service.load_context(str(cfg))
    nodes = service.resolve_nodes(ctx, None)
    return service.run_health(ctx, nodes, service.make_source(ctx, "prometheus"), remediate=remediate)


def statuses(result: service.HealthResult) -> dict[str, str]:
    return {r.node: r.status.value for r in result.reports}


def not_ok(result: service.HealthResult) -> dict[str, list[str]]:
    """What each node that is not OK reads as: the failure message names the check, not only the node."""
    return {
        r.node: [f"{v.code} {v.status.value}: {v.summary}" for v in r.verdicts if v.status.value != "OK"]
        for r in result.reports
        if r.status.value != "OK"
    }


def slurm_reasons(sim: SimCluster) -> dict[str, str]:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-R", "-o", "%N|%E"], env=sim.env, capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_xid79_drains_that_node_alone_and_holds_it_until_a_reboot(sim, cfg):
    monitoring.inject(sim, "gpu-003", "xid=79,gpu=5")
    t0 = time.monotonic()
    result = wait_until(lambda: (r := health_pass(cfg)).status == "FAIL" and r, timeout=30, interval=0.5)
    latency = time.monotonic() - t0
    drains = [d for d in result.decisions if d.action == "drain"]
    assert [(d.node, d.reason in XID79_GPU5, d.result) for d in drains] == [("gpu-003", True, "applied")]
    reason = drains[0].reason
    assert drains[0].latch["action"] == "reboot"
    assert slurm_reasons(sim) == {"gpu-003": reason}
    # fault to drain: within one scrape interval (5 s) plus 5 s; a bound for the record, the
    # benchmark reports the figure
    print(f"fault-to-drain {latency:.1f}s")

    # the same boot: the GPU that fell off the bus never came back, whatever the passes say
    for _ in range(4):
        r = health_pass(cfg)
        assert [d.action for d in r.decisions if d.node == "gpu-003"] == ["keep"], r.decisions
    assert slurm_reasons(sim) == {"gpu-003": reason}
    # a reboot: new boot id, the XID is history, two clean passes, resumed
    monitoring.inject(sim, "gpu-003", "reboot")
    resumed = wait_until(
        lambda: [d for d in health_pass(cfg).decisions if d.node == "gpu-003" and d.action == "resume"],
        timeout=60, interval=1,
    )
    assert "rebooted" in resumed[0].why and resumed[0].result == "applied"
    wait_until(lambda: "gpu-003" not in slurm_reasons(sim), timeout=30)


def test_xid48_waits_for_a_gpu_reset_and_a_repeat_escalates(sim, cfg, tmp_path):
    sim.set_config("health", max_fraction=1.0)
    try:
        monitoring.inject(sim, "gpu-004", "ecc_dbe,gpu=2")
        result = wait_until(lambda: (r := health_pass(cfg)).status == "FAIL" and r, timeout=30, interval=0.5)
        (d,) = [d for d in result.decisions if d.action == "drain"]
        assert d.node == "gpu-004" and d.latch["action"] == "reset_gpu"
        for _ in range(3):  # still asking for a reset: kept
            assert [x.action for x in health_pass(cfg).decisions if x.node == "gpu-004"] == ["keep"]
        # the driver's request for a reset is on record (the drain's pass may have read the DBE from
        # one scrape and the recovery action from the one before: the queries run concurrently)
        assert json.loads((tmp_path / "state.json").read_text())["latches"]["gpu-004"]["reset_seen"]
        monitoring.inject(sim, "gpu-004", "gpu_reset,gpu=2")  # nvidia-smi -r -i 2, same boot
        resumed = wait_until(
            lambda: [x for x in health_pass(cfg).decisions if x.node == "gpu-004" and x.action == "resume"],
            timeout=60, interval=1,
        )
        assert "reset" in resumed[0].why
        wait_until(lambda: "gpu-004" not in slurm_reasons(sim), timeout=30)
        # the same GPU fails again: drained, held for a person, escalated
        monitoring.inject(sim, "gpu-004", "ecc_dbe,gpu=2")
        result = wait_until(
            lambda: (r := health_pass(cfg)) and any(x.action == "drain" for x in r.decisions) and r,
            timeout=40, interval=1,
        )
        assert slurm_reasons(sim)["gpu-004"].endswith("repeat-held")
        assert [x.code for x in result.decisions if x.action == "alert"] == ["escalated"]
        monitoring.inject(sim, "gpu-004", "gpu_reset,gpu=2")
        for _ in range(4):
            assert all(x.action != "resume" for x in health_pass(cfg).decisions)
        assert "gpu-004" in slurm_reasons(sim)
    finally:
        sim.set_config("health", max_fraction=0.10)


def test_dropped_exporter_is_unknown_and_not_drained(sim, cfg):
    monitoring.inject(sim, "gpu-006", "exporter_down")
    result = wait_until(lambda: (r := health_pass(cfg)).status == "UNKNOWN" and r, timeout=40, interval=1)
    assert [n for n, s in statuses(result).items() if s != "OK"] == ["gpu-006"], not_ok(result)
    assert [d for d in result.decisions if d.action in ("drain", "hold", "alert")] == []
    assert slurm_reasons(sim) == {}
    assert result.exit_code == 3


def test_a_node_whose_exporters_stay_down_is_drained_evidence_lost_after_unknown_fail_after(sim, cfg):
    """UNKNOWN ends: gpu-006's exporters stop while the others' answer; UNKNOWN (and not drained) for
    [health] unknown_fail_after, then FAIL evidence-lost and drained like any other FAIL."""
    sim.set_config("health", unknown_fail_after=8.0, unknown_alert_after=4.0, max_fraction=1.0)
    try:
        monitoring.inject(sim, "gpu-006", "exporter_down")
        first = wait_until(lambda: (r := health_pass(cfg)).status == "UNKNOWN" and r, timeout=30, interval=1)
        t0 = time.monotonic()
        assert [d for d in first.decisions if d.action in ("drain", "hold", "alert")] == []
        result = wait_until(
            lambda: (r := health_pass(cfg)) and any(d.action == "drain" for d in r.decisions) and r,
            timeout=30, interval=1,
        )
        assert time.monotonic() - t0 >= 8.0 - 1.0  # the clock started at the first UNKNOWN pass
        (d,) = [d for d in result.decisions if d.action == "drain"]
        assert (d.node, d.code, d.result) == ("gpu-006", "evidence-lost", "applied")
        assert d.latch["action"] == "reboot"
        assert slurm_reasons(sim) == {"gpu-006": d.reason}
        assert [n for n, s in statuses(result).items() if s != "OK"] == ["gpu-006"]
    finally:
        sim.set_config("health", unknown_fail_after=600.0, unknown_alert_after=300.0, max_fraction=0.10)


def test_an_exporter_up_with_zero_gpu_series_is_a_gpu_count_failure(sim, cfg):
    for gpu in range(8):  # NVML lost every GPU; dcgm-exporter still answers its scrapes
        monitoring.inject(sim, "gpu-007", f"gpu_missing,gpu={gpu}")

    def gpu_count(r: service.HealthResult) -> list[str]:
        mine = [x for x in r.reports if x.node == "gpu-007"]
        return [v.summary for x in mine for v in x.verdicts if v.code == "gpu-count"]

    # a scrape between two of the eight injections shows some GPUs still there: judge once all are gone
    wait_until(lambda: "0 of 8 GPUs visible" in gpu_count(health_pass(cfg, remediate=False)), timeout=30,
               interval=1)
    result = health_pass(cfg)
    assert result.status == "FAIL" and "0 of 8 GPUs visible" in gpu_count(result)
    assert [(d.node, d.code) for d in result.decisions if d.action == "drain"] == [("gpu-007", "gpu-count")]


def test_same_fault_on_half_the_nodes_holds_the_brake_and_alerts(sim, cfg):
    half = ["gpu-001", "gpu-002", "gpu-004", "gpu-007"]
    for node in half:
        monitoring.inject(sim, node, "xid=79")
    # the faults land within one scrape; judge once Prometheus has all four (as a watch pass would)
    wait_until(
        lambda: sum(1 for s in statuses(health_pass(cfg, remediate=False)).values() if s == "FAIL") == 4,
        timeout=40,
        interval=1,
    )
    result = health_pass(cfg)
    assert [d for d in result.decisions if d.action == "drain"] == []
    # one cause, two checks (the XID, and the node reboot the driver asks for): a storm each
    alerts = [d for d in result.decisions if d.action == "alert"]
    assert sorted(d.signature for d in alerts) == ["gpu-recovery", "gpu-xid:xid79"], alerts
    assert all("storm" in d.why and d.node == "gpu-[001-002,004,007]" for d in alerts)
    assert slurm_reasons(sim) == {}


def test_operator_drain_is_left_alone(sim, cfg):
    subprocess.run(
        ["scontrol", "update", "nodename=gpu-008", "state=drain", "reason=operator: DIMM swap"],
        env=sim.env,
        check=True,
    )
    monitoring.inject(sim, "gpu-008", "ecc_dbe,gpu=2")
    result = wait_until(
        lambda: (r := health_pass(cfg)) and statuses(r)["gpu-008"] == "FAIL" and r, timeout=40, interval=1
    )
    (d,) = [d for d in result.decisions if d.node == "gpu-008"]
    assert d.action == "none" and "operator drain" in d.why
    monitoring.heal(sim, "gpu-008")
    for _ in range(4):  # clean passes never resume someone else's drain
        r = health_pass(cfg)
        assert all(x.action != "resume" for x in r.decisions)
    assert slurm_reasons(sim) == {"gpu-008": "operator: DIMM swap"}
    subprocess.run(["scontrol", "update", "nodename=gpu-008", "state=resume"], env=sim.env, check=True)


def test_each_simulated_fault_shows_as_its_check_on_its_node(sim, cfg):
    faults = {
        "gpu-001": ("gpu_missing=3", {("gpu-count", "FAIL")}),
        # ib_down: the storm test, last in the module (the link_downed increase it leaves keeps
        # ib-errors failing for the counter window after the heal, which the next test would wait out)
        # the XIDs that ask for a GPU reset: the recovery action (DCGM 4.5's field 1523) says so too
        "gpu-003": (
            "row_remap_failure,gpu=4",
            {("gpu-row-remap", "FAIL"), ("gpu-xid", "FAIL"), ("gpu-recovery", "FAIL")},
        ),
        "gpu-004": (
            "ecc_dbe,gpu=6",
            {("gpu-ecc-dbe", "FAIL"), ("gpu-xid", "FAIL"), ("gpu-row-remap", "FAIL"),
             ("gpu-recovery", "FAIL")},
        ),
        "gpu-005": ("thermal,gpu=2", {("gpu-throttle", "FAIL")}),
        # link state itself: ssh source only
        "gpu-006": ("nvlink_down,gpu=1", {("gpu-xid", "FAIL"), ("gpu-recovery", "FAIL")}),
    }
    for node, (fault, _) in faults.items():
        monitoring.inject(sim, node, fault)

    def problems():
        r = health_pass(cfg, remediate=False)
        got = {rep.node: {(v.code, v.status.value) for v in rep.problems} for rep in r.reports}
        return got if all(want <= got[n] for n, (_, want) in faults.items()) else None

    got = wait_until(problems, timeout=40, interval=1)
    for node, (_, want) in faults.items():
        assert {c for c, _ in got[node]} == {c for c, _ in want}, (node, got[node])
    assert got["gpu-007"] == set() and got["gpu-008"] == set()


def drained(sim: SimCluster) -> set[str]:
    return set(slurm_reasons(sim))


def test_manual_drain_stays_drained_through_ten_clean_passes(sim, cfg, run_opsctl):
    out = run_opsctl("--config", str(cfg), "drain", "gpu-005", "--reason", "DIMM swap ticket 42")
    assert out.returncode == 0, out.stderr
    for _ in range(10):
        r = health_pass(cfg)
        assert r.status == "OK" and all(d.action in ("none", "keep") for d in r.decisions), r.decisions
    assert slurm_reasons(sim) == {"gpu-005": "opsctl:manual:DIMM swap ticket 42"}


def test_watch_drain_counts_against_the_brake(sim, cfg):
    from opsctl.config import load_config
    from opsctl.remediation.passes import drain_failed_nodes

    sim.set_config("guardrails", max_drain_fraction=0.5)
    # the brake alone: a fatal fault past it has its own allowance (the fatal_allowance test)
    sim.set_config("health", max_drains=1, max_fraction=1.0, fatal_max_drains=0)
    try:
        config = load_config(str(cfg))
        ctx = service.load_context(str(cfg))
        (d,) = drain_failed_nodes(config, ctx.slurm, {"gpu-007": "slurmd dead"}, "run-x")
        assert (d.action, d.result) == ("drain", "applied")
        assert slurm_reasons(sim) == {"gpu-007": "opsctl:watch:launch-node-failed:slurmd dead in run run-x"}
        monitoring.inject(sim, "gpu-002", "ecc_dbe,gpu=1")
        result = wait_until(
            lambda: (r := health_pass(cfg)) and statuses(r)["gpu-002"] == "FAIL" and r, timeout=40, interval=1
        )
        assert [d.node for d in result.decisions if d.action == "hold"] == ["gpu-002"]
        assert drained(sim) == {"gpu-007"}
        # and health never resumes the watcher's drain
        for _ in range(3):
            assert all(x.action != "resume" for x in health_pass(cfg).decisions)
        assert "gpu-007" in drained(sim)
    finally:
        sim.set_config("guardrails", max_drain_fraction=0.10)
        sim.set_config("health", max_drains=2, max_fraction=0.10, fatal_max_drains=2)


def test_concurrent_remediation_processes_never_exceed_the_brake(sim, cfg, opsctl_bin, tmp_path):
    """Four `opsctl health --remediate` processes at once, three failing nodes with different
    faults, a brake of two: exactly two drains, whatever the interleaving."""
    sim.set_config("guardrails", max_drain_fraction=0.5)
    sim.set_config("health", max_drains=2, max_fraction=1.0, fatal_max_drains=0)  # the brake alone
    try:
        faults = {"gpu-001": "xid=79", "gpu-004": "ecc_dbe,gpu=2", "gpu-006": "gpu_missing=1"}
        for node, fault in faults.items():
            monitoring.inject(sim, node, fault)
        wait_until(
            lambda: sum(s == "FAIL" for s in statuses(health_pass(cfg, remediate=False)).values()) == 3,
            timeout=40, interval=1,
        )
        for _ in range(3):
            procs = [
                subprocess.Popen([opsctl_bin, "--config", str(cfg), "health", "--remediate", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(4)
            ]
            for p in procs:
                p.communicate(timeout=120)
                assert p.returncode == 1, p.returncode
        assert len(drained(sim) & set(faults)) == 2 and drained(sim) <= set(faults)
        state = json.loads((tmp_path / "state.json").read_text())
        assert sorted(d["node"] for d in state["drains"]) == sorted(drained(sim))
    finally:
        sim.set_config("guardrails", max_drain_fraction=0.10)
        sim.set_config("health", max_drains=2, max_fraction=0.10, fatal_max_drains=2)


def test_xid79_past_the_drain_guardrail_is_drained_under_the_fatal_allowance(sim, cfg, run_opsctl, tmp_path):
    """An operator's `opsctl drain` fills the guardrail (max(1, 10% of 8) = 1 node out); XID 79 on
    another node used to be refused pass after pass and left taking jobs, never latched. A fatal
    fault is drained under [health] fatal_max_drains past the guardrail, and latched."""
    out = run_opsctl("--config", str(cfg), "drain", "gpu-002", "--reason", "operator hold")
    assert out.returncode == 0, out.stderr
    monitoring.inject(sim, "gpu-003", "xid=79,gpu=5")
    result = wait_until(
        lambda: (r := health_pass(cfg)) and statuses(r)["gpu-003"] == "FAIL" and r, timeout=30, interval=0.5
    )
    (d,) = [d for d in result.decisions if d.node == "gpu-003" and d.action != "alert"]
    assert (d.action, d.result, d.reason in XID79_GPU5) == ("drain", "applied", True), d
    assert [(a.code, a.node) for a in result.decisions if a.action == "alert"] == [("fatal-drain", "gpu-003")]
    assert slurm_reasons(sim) == {"gpu-002": "opsctl:manual:operator hold", "gpu-003": d.reason}
    # drained in slurmctld: it takes no new job
    show = subprocess.run(["scontrol", "show", "node", "gpu-003"], env=sim.env, capture_output=True,
                          text=True, check=True).stdout
    assert "DRAIN" in show, show
    latch = json.loads((tmp_path / "state.json").read_text())["latches"]["gpu-003"]
    assert latch["action"] == "reboot" and not latch.get("in_service")
    r = health_pass(cfg)  # the next pass keeps it, and leaves the operator's drain alone
    assert {d.node: d.action for d in r.decisions if d.node in ("gpu-002", "gpu-003")} == {
        "gpu-002": "none", "gpu-003": "keep"}, r.decisions
    monitoring.inject(sim, "gpu-003", "reboot")  # the XID is history for the next test


class CountingRun:
    """Wraps a CLI backend's ``run``: every Slurm command it issues, as (command, subcommand) kinds."""

    def __init__(self, backend) -> None:
        self.real = backend.run
        self.commands: list[list[str]] = []
        backend.run = self

    def __call__(self, argv, *args, **kwargs):
        self.commands.append(list(argv))
        return self.real(argv, *args, **kwargs)

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for argv in self.commands:
            if argv[0] == "sinfo" or (argv[:4] == ["scontrol", "-d", "-o", "show"] and "node" in argv):
                kind = "node-read"
            elif argv[0] == "squeue" or (argv[:3] == ["scontrol", "-o", "show"] and "job" in argv):
                kind = "job-read"
            elif argv[:2] == ["scontrol", "update"]:
                kind = "drain" if "State=DRAIN" in argv else "resume"
            else:
                kind = " ".join(argv[:2])
            out[kind] = out.get(kind, 0) + 1
        return out


def test_a_remediator_pass_reads_slurm_once(sim, cfg, tmp_path):
    """One pass of the service (the node set, the view policy decides on, the partition's size, the
    guardrail's count before each drain, the node-state gauges after the pass) reads the nodes once
    and the jobs once, then issues its actions: here one drain, then a pass that keeps it."""
    from opsctl.remediation.loop import Remediator

    sim.set_config("remediator", metrics_address="", pause_file=str(tmp_path / "paused.json"),
                   status_file=str(tmp_path / "status.json"))
    monitoring.inject(sim, "gpu-006", "xid=79,gpu=1")
    wait_until(lambda: statuses(health_pass(cfg, remediate=False))["gpu-006"] == "FAIL", timeout=30,
               interval=0.5)
    service_ = Remediator(str(cfg))
    counter = CountingRun(service_.ctx.slurm)
    first = service_.run_pass()
    assert first.ok, first.error
    assert [(d["node"], d["action"], d["result"]) for d in first.decisions] == [
        ("gpu-006", "drain", "applied")]
    assert counter.kinds() == {"node-read": 1, "job-read": 1, "drain": 1}, counter.commands
    counter.commands.clear()
    second = service_.run_pass()
    assert second.ok and second.decisions == [], second  # kept drained: nothing shown, nothing done
    assert counter.kinds() == {"node-read": 1, "job-read": 1}, counter.commands
    # the gauges show the drain the pass made, without reading Slurm again for them
    assert service_.metrics.registry.get_sample_value(
        "opsctl_remediator_slurm_node_state", {"node": "gpu-006", "state": "drained"}) == 1
    monitoring.inject(sim, "gpu-006", "reboot")  # the XID is history for the next test


def test_a_drain_whose_scontrol_timed_out_after_slurmctld_applied_it_is_latched_next_pass(sim, cfg, tmp_path):
    """`scontrol update State=DRAIN` that the real slurmctld applied but whose answer never came in
    time (a wrapper on the backend's PATH runs the real scontrol, then hangs past the command
    timeout): the pass says "unconfirmed", not failed, with the intent saved; the next pass finds
    the node drained with that reason and latches it ("reconciled" in the audit log), and it is
    kept until a reboot proves the fix. It used to be recorded as failed, with no latch: drained
    for good."""
    from opsctl.audit import AuditLog
    from opsctl.config import load_config

    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    wrapper = wrappers / "scontrol"
    wrapper.write_text(f'#!/bin/sh\n"{shutil.which("scontrol")}" "$@" || exit $?\n'
                       'case "$*" in *State=DRAIN*) exec sleep 60;; esac\n')
    wrapper.chmod(0o755)
    monitoring.inject(sim, "gpu-004", "xid=79,gpu=2")
    wait_until(lambda: statuses(health_pass(cfg, remediate=False))["gpu-004"] == "FAIL", timeout=30,
               interval=0.5)
    ctx = service.load_context(str(cfg))
    ctx.slurm.env["PATH"] = f"{wrappers}:{ctx.slurm.env['PATH']}"
    ctx.slurm.timeout = 3.0
    targets = service.pass_nodes(ctx, None)
    first = service.run_health(ctx, targets.names, service.make_source(ctx, "prometheus"), remediate=True,
                               slurm=targets.slurm)
    (d,) = [d for d in first.decisions if d.node == "gpu-004"]
    assert (d.action, d.result) == ("drain", "unconfirmed") and "timed out" in d.why, d
    reason = d.reason
    assert reason.startswith("opsctl:health:") and "gpu 2" in reason, reason
    assert slurm_reasons(sim) == {"gpu-004": reason}  # slurmctld applied it all the same
    state = json.loads((tmp_path / "state.json").read_text())
    assert "gpu-004" not in state["latches"] and state["intents"]["gpu-004"]["reason"] == reason

    second = health_pass(cfg)  # the service's next pass, with a scontrol that answers
    assert [(x.action, x.result) for x in second.decisions if x.node == "gpu-004"] == [
        ("drain", "reconciled"), ("keep", "noop")], second.decisions
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["intents"] == {} and state["latches"]["gpu-004"]["action"] == "reboot"
    audit = [(x["nodes"], x["result"]) for x in AuditLog(load_config(str(cfg)).audit.log).read()
             if x["reason"] == reason]
    assert audit[-2:] == [(["gpu-004"], "failed"), (["gpu-004"], "reconciled")], audit
    assert [x.action for x in health_pass(cfg).decisions if x.node == "gpu-004"] == ["keep"]
    # the latch is the real one: a reboot proves the fix and remediation resumes its drain
    monitoring.inject(sim, "gpu-004", "reboot")
    wait_until(lambda: [x for x in health_pass(cfg).decisions
                        if x.node == "gpu-004" and x.action == "resume"], timeout=60, interval=1)
    wait_until(lambda: "gpu-004" not in slurm_reasons(sim), timeout=30)


def test_auto_reboot_reboots_a_drained_xid79_node_through_slurm_and_its_boot_id_proves_it(sim, cfg, tmp_path):
    """[health] auto_reboot: the XID 79 node is drained, then, idle, rebooted through the real
    slurmctld (`scontrol reboot ASAP nextstate=RESUME`, the sim's RebootProgram gives the node's
    hardware a new boot), resumed by Slurm, and the pass sees the new boot id. Nobody at the keyboard."""
    from opsctl.audit import AuditLog
    from opsctl.config import load_config
    from opsctl.remediation.policy import Decision

    node = "gpu-006"
    sim.set_config("health", auto_reboot=True)
    try:
        monitoring.inject(sim, node, "xid=79,gpu=2")
        first = wait_until(lambda: [d for d in health_pass(cfg).decisions if d.action == "drain"], timeout=30,
                           interval=0.5)
        assert [(d.node, d.result, d.latch["action"]) for d in first] == [(node, "applied", "reboot")]
        reason = first[0].reason
        # idle and drained by us: the next pass asks Slurm to reboot it, with our reason
        (reboot,) = [d for d in health_pass(cfg).decisions if d.action == "reboot"]
        assert (reboot.node, reboot.result, reboot.reason) == (node, "applied", reason)
        # slurmctld runs the RebootProgram and resumes the node once its slurmd is back
        wait_until(lambda: node not in slurm_reasons(sim), timeout=60, interval=1)

        def back() -> list[Decision]:
            return [d for d in health_pass(cfg).decisions if d.node == node and "through Slurm" in d.why]

        proven = wait_until(back, timeout=60, interval=1)
        assert "rebooted through Slurm" in proven[0].why and "boot id changed" in proven[0].why
        assert proven[0].action == "none"
        assert node not in json.loads((tmp_path / "state.json").read_text())["latches"]
        assert slurm_reasons(sim) == {}
        audit = AuditLog(load_config(str(cfg)).audit.log).read()
        assert ("reboot", [node], "applied") in [(x["action"], x["nodes"], x["result"]) for x in audit]
        # rebooted once: later passes leave it in service
        for _ in range(2):
            later = [d for d in health_pass(cfg).decisions if d.node == node]
            why = [(v["code"], v["summary"]) for d in later for v in d.verdicts]
            assert [d.action for d in later] == ["none"], why
    finally:
        sim.set_config("health", auto_reboot=False)


def test_a_storm_holds_only_its_own_signature_and_the_xid79_node_is_drained(sim, cfg):
    """A fabric HCA down on every node (ib-port FAIL everywhere; ib-errors leaves a port that is down
    to ib-port) is one storm; XID 79 on gpu-005 is not part of it. Passes start right after the
    injection, as the service's do: Prometheus scrapes the nodes at different offsets, so the first
    passes see the port down on a few nodes only, below the storm threshold; confirm_after keeps them
    from being drained until the storm is visible. gpu-005 is drained for its XID at first sight.
    Last in the module: once healed, the ports' link_downed keeps ib-errors failing for the counter
    window, and no test follows to wait."""
    for node in sim.node_names:
        monitoring.inject(sim, node, "ib_down=mlx5_0")
    monitoring.inject(sim, "gpu-005", "xid=79,gpu=5")
    storm_passes = 0
    deadline = time.monotonic() + 60
    # until two passes have seen the storm on every node and gpu-005 is drained: its XID may reach
    # Prometheus a scrape after the ports (each target is scraped at its own offset)
    while storm_passes < 2 or "gpu-005" not in slurm_reasons(sim):
        assert time.monotonic() < deadline, "in 60 s: no storm of ib-port everywhere, or gpu-005 not drained"
        result = health_pass(cfg)
        alerts = [d for d in result.decisions if d.action == "alert"]
        assert all((d.code, d.signature) == ("storm", "ib-port") for d in alerts), alerts
        assert all("gpu-xid" not in d.why and "xid79" not in d.why for d in alerts)
        assert set(slurm_reasons(sim)) <= {"gpu-005"}, slurm_reasons(sim)  # nobody drained for the port
        mine = {d.node: d for d in result.decisions if d.action != "alert"}
        if alerts and alerts[0].node == "gpu-[001-008]":
            storm_passes += 1
            held = [d for node, d in mine.items() if node != "gpu-005"]
            assert all(d.action == "none" and "storm" in d.why for d in held), held
        time.sleep(1)
    assert list(slurm_reasons(sim)) == ["gpu-005"] and slurm_reasons(sim)["gpu-005"] in XID79_GPU5
    assert mine["gpu-005"].action in ("drain", "keep") and mine["gpu-005"].code in ("gpu-xid", "gpu-recovery")
    # a port down is ib-port's alone: its link_downed grew too, not a second FAIL (ib-errors judges
    # ports that are up)
    for rep in health_pass(cfg, remediate=False).reports:
        fails = {v.code for v in rep.problems if v.status.value == "FAIL"}
        assert "ib-port" in fails and "ib-errors" not in fails, (rep.node, fails)
