"""The on-call commands through the real `opsctl` binary against a real 4-node sim."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration


@pytest.fixture
def sim(sim4: SimCluster) -> Iterator[SimCluster]:
    yield sim4
    sim4.reset()


def scontrol_node(sim: SimCluster, node: str) -> str:
    return subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, env=sim.env,
                          check=True, timeout=60).stdout


def audit(sim: SimCluster) -> list[dict[str, object]]:
    path = sim.audit_log
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("opsctl: error: ") and len(result.stderr.strip().splitlines()) == 1


def test_nodes_json_lists_four_nodes_with_eight_gpus(run_opsctl, sim: SimCluster) -> None:
    result = run_opsctl("nodes", "--json", env=sim.env_vars)
    assert result.returncode == 0, result.stderr
    nodes = json.loads(result.stdout)
    assert [n["name"] for n in nodes] == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert all(n["gpus_total"] == 8 and n["gpu_type"] == "h200" and n["state"] == "idle" for n in nodes)
    table = run_opsctl("nodes", "gpu-[001-002]", env=sim.env_vars)
    assert table.returncode == 0 and "gpu-001" in table.stdout and "gpu-003" not in table.stdout
    assert "0/8" in table.stdout


def test_drain_then_resume_round_trip(run_opsctl, sim: SimCluster) -> None:
    result = run_opsctl("drain", "gpu-002", "--reason", "xid 79", env=sim.env_vars)
    assert result.returncode == 0, result.stderr
    shown = scontrol_node(sim, "gpu-002")
    assert "DRAIN" in shown and "Reason=opsctl:manual:xid 79 [" in shown
    result = run_opsctl("resume", "gpu-002", env=sim.env_vars)
    assert result.returncode == 0, result.stderr
    shown = scontrol_node(sim, "gpu-002")
    assert re.search(r"State=IDLE\s", shown) and "DRAIN" not in shown, shown
    last = audit(sim)[-2:]
    assert [(r["action"], r["result"], r["nodes"]) for r in last] == [
        ("drain", "applied", ["gpu-002"]), ("resume", "applied", ["gpu-002"])]
    assert last[0]["reason"] == "opsctl:manual:xid 79" and last[0]["user"]


def test_dry_run_changes_nothing_but_is_audited(run_opsctl, sim: SimCluster) -> None:
    args = ("drain", "gpu-001", "--reason", "maintenance", "--dry-run", "--json")
    result = run_opsctl(*args, env=sim.env_vars)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "dry-run"
    assert "DRAIN" not in scontrol_node(sim, "gpu-001")
    assert audit(sim)[-1]["result"] == "dry-run"


def test_draining_three_of_four_is_refused_without_force(run_opsctl, sim: SimCluster) -> None:
    result = run_opsctl("drain", "gpu-[001-003]", "--reason", "rack power", env=sim.env_vars)
    assert_clean_error(result, 2)
    assert "refusing" in result.stderr
    for node in ("gpu-001", "gpu-002", "gpu-003"):
        assert "DRAIN" not in scontrol_node(sim, node)
    assert audit(sim)[-1]["result"] == "refused"
    forced = run_opsctl("drain", "gpu-[001-003]", "--reason", "rack power", "--force", env=sim.env_vars)
    assert forced.returncode == 0, forced.stderr
    assert all("DRAIN" in scontrol_node(sim, n) for n in ("gpu-001", "gpu-002", "gpu-003"))


def test_operator_drain_is_not_resumed_without_force(run_opsctl, sim: SimCluster) -> None:
    subprocess.run(["scontrol", "update", "NodeName=gpu-004", "State=DRAIN", "Reason=bad PSU"], env=sim.env,
                   check=True, timeout=60)
    result = run_opsctl("resume", "gpu-004", env=sim.env_vars)
    assert_clean_error(result, 2)
    assert "DRAIN" in scontrol_node(sim, "gpu-004")
    # The operator's drain also counts against the limit: one more would exceed 1 of 4.
    refused = run_opsctl("drain", "gpu-001", "--reason", "xid 48", env=sim.env_vars)
    assert_clean_error(refused, 2)
    forced = run_opsctl("resume", "gpu-004", "--force", env=sim.env_vars)
    assert forced.returncode == 0, forced.stderr
    assert "DRAIN" not in scontrol_node(sim, "gpu-004")


def test_force_takes_over_a_remediation_drain_as_manual(run_opsctl, sim: SimCluster) -> None:
    """Remediation drains gpu-003 (the real policy, latch and slurmctld); an operator's
    `opsctl drain --force` takes it over: the reason becomes the operator's opsctl:manual: one, the
    audit says from whom, and remediation's clean passes no longer resume it."""
    from opsctl.checks.model import Status, Verdict
    from opsctl.checks.runner import NodeReport
    from opsctl.checks.settings import PolicyConfig
    from opsctl.config import load_config
    from opsctl.remediation.actions import act
    from opsctl.remediation.policy import decide
    from opsctl.remediation.state import PolicyState
    from opsctl.slurm import backend_from_config

    backend = backend_from_config(load_config(str(sim.config_path)))
    # confirm_after 0: drained at first sight (the take-over is what this test is about)
    cfg, state, now = PolicyConfig(resume_after_clean=2, confirm_after=0), PolicyState(), 1_700_000_000.0

    def health_pass(failing: bool) -> list[tuple[str, str]]:
        nonlocal now
        now += 30
        reports = [NodeReport(n, Status.OK, [Verdict("ib-port", Status.OK, n, None, "up")])
                   for n in sim.node_names]
        if failing:  # a fault whose fix needs no proof: clean passes alone resume it
            down = Verdict("ib-port", Status.FAIL, "gpu-003", None, "mlx5_2/1: state DOWN",
                           {"short": "mlx5_2 state DOWN"})
            reports[2] = NodeReport("gpu-003", Status.FAIL, [down])
        decisions = decide(reports, {n.name: n for n in backend.nodes()}, state, cfg, now, len(reports))
        act(decisions, backend, state, now, dry_run=False, shadow=False)
        return [(d.node, d.action) for d in decisions if d.action not in ("none", "keep")]

    assert health_pass(failing=True) == [("gpu-003", "drain")]
    health_reason = "opsctl:health:ib-port:mlx5_2 state DOWN"
    assert f"Reason={health_reason} [" in scontrol_node(sim, "gpu-003")
    assert "gpu-003" in state.latches

    # without --force: left to remediation, and the operator is told how to take it over
    plain = run_opsctl("drain", "gpu-003", "--reason", "RMA 4711", env=sim.env_vars)
    assert plain.returncode == 0, plain.stderr
    assert "skipped gpu-003: already drained by opsctl" in plain.stdout and "--force" in plain.stdout
    assert f"Reason={health_reason} [" in scontrol_node(sim, "gpu-003")

    # --force --dry-run: says what it would take over, changes nothing
    dry = run_opsctl("drain", "gpu-003", "--reason", "RMA 4711", "--force", "--dry-run", "--json",
                     env=sim.env_vars)
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["result"] == "dry-run" and doc["plan"]["to_drain"] == ["gpu-003"]
    assert doc["plan"]["taken_over"] == {"gpu-003": health_reason}
    assert f"Reason={health_reason} [" in scontrol_node(sim, "gpu-003")
    record = audit(sim)[-1]
    assert record["result"] == "dry-run" and "taken over from health" in str(record["detail"])

    forced = run_opsctl("drain", "gpu-003", "--reason", "RMA 4711", "--force", env=sim.env_vars)
    assert forced.returncode == 0, forced.stderr
    assert "drained gpu-003" in forced.stdout
    assert f"took over gpu-003 from health: {health_reason!r}" in forced.stdout
    assert "Reason=opsctl:manual:RMA 4711 [" in scontrol_node(sim, "gpu-003")
    record = audit(sim)[-1]
    assert (record["action"], record["result"], record["reason"], record["forced"]) == (
        "drain", "applied", "opsctl:manual:RMA 4711", True)
    assert f"gpu-003 taken over from health ({health_reason})" in str(record["detail"])

    # remediation's latch no longer claims it: clean passes resume nothing, the hold stays
    for _ in range(4):
        assert health_pass(failing=False) == []
    assert "gpu-003" not in state.latches
    assert "Reason=opsctl:manual:RMA 4711 [" in scontrol_node(sim, "gpu-003")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("drain", "gpu-[001-", "--reason", "x"), "malformed node set"),
        (("drain", "gpu-001;reboot", "--reason", "x"), "malformed node set"),
        (("drain", "gpu-009", "--reason", "x"), "unknown node"),
        (("drain", "gpu-001", "--reason", ""), "empty reason"),
        (("drain", "gpu-001", "--reason", "x; rm -rf /"), "not allowed"),
        (("drain", "gpu-001", "--reason", "$(reboot)"), "not allowed"),
        (("resume", "gpu-[001-004],nope!"), "malformed node set"),
        (("nodes", "gpu-`id`"), "malformed node set"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(
    run_opsctl, sim: SimCluster, args: tuple[str, ...], message: str
) -> None:
    result = run_opsctl(*args, env=sim.env_vars)
    assert_clean_error(result, 2)
    assert message in result.stderr
    assert all("DRAIN" not in scontrol_node(sim, n) for n in sim.node_names)


def test_missing_reason_option_is_usage_error(run_opsctl, sim: SimCluster) -> None:
    result = run_opsctl("drain", "gpu-001", env=sim.env_vars)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_unwritable_audit_log_blocks_the_action(run_opsctl, sim: SimCluster, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    conf = tmp_path / "opsctl.toml"
    conf.write_text(sim.config_path.read_text().replace(str(sim.audit_log), str(blocker / "audit.jsonl")))
    result = run_opsctl("--config", str(conf), "drain", "gpu-001", "--reason", "x", env=sim.env_vars)
    assert_clean_error(result, 2)
    assert "audit log" in result.stderr and "DRAIN" not in scontrol_node(sim, "gpu-001")


def test_unreachable_slurmctld_exits_3(run_opsctl, sim_factory) -> None:
    lone = sim_factory(nodes=1)
    lone.stop_process("slurmctld")
    for args in (("nodes",), ("drain", "gpu-001", "--reason", "x")):
        result = run_opsctl(*args, env=lone.env_vars)
        assert_clean_error(result, 3)
        assert "unreachable" in result.stderr
    assert audit(lone)[-1]["result"] == "failed"  # the attempt is on record
