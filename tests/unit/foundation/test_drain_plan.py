from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.audit import AuditLog
from opsctl.config import GuardrailsSection
from opsctl.drain import drain_limit, plan_drain, plan_resume, validate_reason
from opsctl.errors import ConfigError, UsageError
from opsctl.model import Node


def cluster(n: int, **drained: str) -> list[Node]:
    nodes = []
    for i in range(1, n + 1):
        name = f"gpu-{i:03d}"
        node = Node(name=name, state="idle", partitions=["gpu"], gpus_total=8, gpu_type="h200")
        if name.replace("-", "_") in drained:
            node.flags = {"DRAIN"}
            node.reason = drained[name.replace("-", "_")]
            node.reason_user = "alice"
        nodes.append(node)
    return nodes


GUARD = GuardrailsSection()


def test_limit_is_a_share_with_a_floor() -> None:
    assert drain_limit(4, GUARD) == 1
    assert drain_limit(64, GUARD) == 6
    assert drain_limit(100, GuardrailsSection(max_drain_fraction=0.29)) == 29
    assert drain_limit(64, GuardrailsSection(max_drain_fraction=0.0, min_drain_nodes=0)) == 0


def test_one_of_four_is_allowed_three_are_refused() -> None:
    assert not plan_drain(cluster(4), ["gpu-002"], GUARD, "gpu").refusal
    plan = plan_drain(cluster(4), ["gpu-001", "gpu-002", "gpu-003"], GUARD, "gpu")
    assert plan.refusal and "3 of 4" in plan.refusal
    forced = plan_drain(cluster(4), ["gpu-001", "gpu-002", "gpu-003"], GUARD, "gpu", force=True)
    assert not forced.refusal and forced.to_drain == ["gpu-001", "gpu-002", "gpu-003"]


def test_nodes_drained_by_anyone_count_against_the_limit() -> None:
    nodes = cluster(4, gpu_004="operator: bad fan")
    plan = plan_drain(nodes, ["gpu-001"], GUARD, "gpu")
    assert plan.out_before == 1 and plan.out_after == 2 and plan.refusal
    down = cluster(4)
    down[3].state = "down"
    assert plan_drain(down, ["gpu-001"], GUARD, "gpu").refusal


def test_already_drained_nodes_are_left_alone() -> None:
    nodes = cluster(20, gpu_001="opsctl: xid 79", gpu_002="operator: fan")
    plan = plan_drain(nodes, ["gpu-001", "gpu-002"], GUARD, "gpu")
    assert plan.to_drain == [] and set(plan.skipped) == {"gpu-001", "gpu-002"} and not plan.refusal
    forced = plan_drain(nodes, ["gpu-001", "gpu-002"], GUARD, "gpu", force=True)
    assert forced.to_drain == ["gpu-002"]  # taking over the operator's drain needs --force


def test_unknown_nodes_and_empty_partition() -> None:
    with pytest.raises(UsageError, match="gpu-009"):
        plan_drain(cluster(4), ["gpu-009"], GUARD, "gpu")
    with pytest.raises(ConfigError, match="partition"):
        plan_drain(cluster(4), ["gpu-001"], GUARD, "cpu")


def test_resume_only_opsctl_drains_unless_forced() -> None:
    nodes = cluster(4, gpu_001="opsctl: xid 79", gpu_002="operator: fan")
    plan = plan_resume(nodes, ["gpu-001"])
    assert plan.to_resume == ["gpu-001"] and not plan.refusal
    mixed = plan_resume(nodes, ["gpu-001", "gpu-002"])
    assert mixed.refusal and "gpu-002" in mixed.refusal  # all or nothing
    assert plan_resume(nodes, ["gpu-001", "gpu-002"], force=True).to_resume == ["gpu-001", "gpu-002"]
    idle = plan_resume(nodes, ["gpu-003"])
    assert idle.to_resume == [] and "not drained" in idle.skipped["gpu-003"]


BAD_REASONS = ["", "   ", "a;b", "$(reboot)", "x`id`", "a|b", "new\nline", "tab\there", "x" * 201, "quote'"]


@pytest.mark.parametrize("reason", BAD_REASONS)
def test_bad_reasons(reason: str) -> None:
    with pytest.raises(UsageError):
        validate_reason(reason)


def test_good_reasons_are_normalized() -> None:
    assert validate_reason("  xid 79   on GPU 3 ") == "xid 79 on GPU 3"
    assert validate_reason("temp=92C, ticket INC-42/a@b 5%") == "temp=92C, ticket INC-42/a@b 5%"


def test_audit_log_appends_json_lines(tmp_path: Path) -> None:
    from opsctl.audit import AuditRecord

    log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    log.check_writable()
    log.append(AuditRecord(action="drain", nodes=["gpu-001"], result="dry-run", reason="opsctl: x"))
    log.append(AuditRecord(action="resume", nodes=["gpu-001"], result="applied"))
    records = log.read()
    assert [r["action"] for r in records] == ["drain", "resume"]
    assert {"time", "user", "host", "nodes", "action", "reason", "result"} <= records[0].keys()


def test_unwritable_audit_log_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="audit log"):
        AuditLog(blocker / "audit.jsonl").check_writable()
