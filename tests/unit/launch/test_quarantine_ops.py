"""The quarantine file (strict loading, the writers' lock) and the operator actions on it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from quarantine_unit_helpers import NodesOnly, four_nodes

from opsctl.audit import AuditLog
from opsctl.errors import ConfigError, UsageError
from opsctl.launch.quarantine import Quarantine, QuarantineEntry
from opsctl.launch.quarantine_ops import (
    SlurmView,
    apply_add,
    apply_release,
    list_quarantine,
    plan_add,
    plan_release,
    read_slurm,
)


def seeded(path: Path) -> Quarantine:
    q = Quarantine(path, {
        "gpu-002": QuarantineEntry("gpu-002", "slurm NOT_RESPONDING", "run-a", 41, 1796227200.0),
        "gpu-003": QuarantineEntry("gpu-003", "bad fan", time=1796227260.5, user="alice"),
    })
    q.save()
    return q


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "is unreadable"),
    ("[]", "expected an object with a \"nodes\" list"),
    ('{"nodes": {"gpu-001": {}}}', "expected an object with a \"nodes\" list"),
    ('{"nodes": [{"reason": "x"}]}', "an entry without a node name"),
    ('{"nodes": [{"node": "gpu-001", "reason": "x", "job_id": "7"}]}', "gpu-001: job_id is '7'"),
    ('{"nodes": [{"node": "gpu-001"}]}', "gpu-001: "),  # no reason
])
def test_a_damaged_file_is_a_one_line_config_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "q.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Quarantine.load(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_entries_of_older_and_newer_versions_load(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"nodes": [
        {"node": "gpu-001", "reason": "r", "run_id": "x", "job_id": 3, "time": 12},  # no user field
        {"node": "gpu-002", "reason": "r", "colour": "blue"},  # a key this version does not know
    ]}))
    q = Quarantine.load(path)
    assert q.nodes == {"gpu-001", "gpu-002"}
    assert q.entries["gpu-001"].time == 12.0 and q.entries["gpu-001"].user == ""


def test_a_writer_waits_for_the_lock_and_keeps_the_other_writers_entry(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    watcher = Quarantine.load(path)
    with Quarantine.locked(path) as held:
        adder = threading.Thread(target=watcher.add, args=("gpu-004", "slurm DOWN", "run-b", 9))
        adder.start()
        adder.join(0.3)
        assert adder.is_alive()  # blocked on the lock (a slow machine only makes this more true)
        held.entries["gpu-001"] = QuarantineEntry("gpu-001", "bad fan", user="alice")
        held.save()
    adder.join(30)
    assert not adder.is_alive()
    assert Quarantine.load(path).nodes == {"gpu-001", "gpu-004"}


ADD_TEN = """
import sys
from opsctl.launch.quarantine import Quarantine
path, first = sys.argv[1], int(sys.argv[2])
for i in range(first, first + 10):
    Quarantine.load(path).add(f"gpu-{i:03d}", "stress")
"""


def test_concurrent_writers_in_processes_lose_no_entry(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    procs = [subprocess.Popen([sys.executable, "-c", ADD_TEN, str(path), str(first)])
             for first in (0, 10, 20, 30)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert Quarantine.load(path).nodes == {f"gpu-{i:03d}" for i in range(40)}


def test_release_is_all_or_nothing(tmp_path: Path) -> None:
    q = seeded(tmp_path / "q.json")
    view = SlurmView({n.name: n for n in four_nodes()})
    with pytest.raises(UsageError, match=r"^not quarantined: gpu-\[001,004\] \(nothing released"):
        plan_release(q, ["gpu-001", "gpu-002", "gpu-004"], view)
    plan = plan_release(q, ["gpu-002", "gpu-003"], view, "fan replaced")
    assert [e.node for e in plan.entries] == ["gpu-002", "gpu-003"] and plan.still_drained == {}


def test_release_says_which_nodes_stay_drained(tmp_path: Path) -> None:
    q = seeded(tmp_path / "q.json")
    nodes = four_nodes(gpu_002="opsctl:launch-node-failed:slurm in run run-a", gpu_003="operator: fan")
    plan = plan_release(q, ["gpu-002", "gpu-003"], SlurmView({n.name: n for n in nodes}))
    assert plan.drained_by_opsctl == ["gpu-002"]
    assert plan.still_drained == {"gpu-002": "drained (opsctl:launch-node-failed:slurm in run run-a)",
                                  "gpu-003": "drained (operator: fan)"}
    unknown = plan_release(q, ["gpu-002"], SlurmView(None, "slurmctld unreachable"))
    assert unknown.still_drained == {} and unknown.slurm_error == "slurmctld unreachable"


def test_apply_release_removes_and_audits_who_and_why(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    q = seeded(path)
    audit = AuditLog(tmp_path / "audit.jsonl")
    plan = plan_release(q, ["gpu-002"], SlurmView({}), "PSU replaced")
    assert apply_release(path, audit, plan, dry_run=True) == "dry-run"
    assert Quarantine.load(path).nodes == {"gpu-002", "gpu-003"}
    assert apply_release(path, audit, plan) == "applied"
    assert Quarantine.load(path).nodes == {"gpu-003"}
    dry, applied = audit.read()
    assert (dry["action"], dry["result"]) == ("quarantine-release", "dry-run")
    assert (applied["action"], applied["result"], applied["nodes"]) == ("quarantine-release", "applied",
                                                                         ["gpu-002"])
    assert applied["reason"] == "PSU replaced" and applied["user"] and applied["host"]
    assert "run run-a job 41" in applied["detail"]


def test_a_release_that_lost_a_race_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    q = seeded(path)
    plan = plan_release(q, ["gpu-002", "gpu-003"], SlurmView({}))
    Quarantine.load(path).release("gpu-003")  # another operator, meanwhile
    audit = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(UsageError, match="not quarantined: gpu-003"):
        apply_release(path, audit, plan)
    assert Quarantine.load(path).nodes == {"gpu-002"}
    assert audit.read()[-1]["result"] == "rejected"


def test_add_checks_names_against_slurm_when_it_answers(tmp_path: Path) -> None:
    q = seeded(tmp_path / "q.json")
    view = read_slurm(lambda: NodesOnly(four_nodes()))
    with pytest.raises(UsageError, match=r"^unknown node\(s\): gpu-\[005-006\]"):
        plan_add(q, ["gpu-001", "gpu-005", "gpu-006"], view, "r")
    plan = plan_add(q, ["gpu-001", "gpu-003"], view, "cooling")
    assert plan.to_add == ["gpu-001"] and plan.already == {"gpu-003": "bad fan"}
    offline = read_slurm(lambda: NodesOnly(four_nodes(), down=True))
    assert not offline.reachable and "unreachable" in offline.error
    unchecked = plan_add(q, ["gpu-099"], offline, "cooling")
    assert unchecked.to_add == ["gpu-099"] and unchecked.slurm_error == offline.error


def test_apply_add_records_the_operator(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    q = seeded(path)
    audit = AuditLog(tmp_path / "audit.jsonl")
    plan = plan_add(q, ["gpu-001", "gpu-003"], SlurmView(None), "cooling")
    assert apply_add(path, audit, plan, dry_run=True) == "dry-run"
    assert "gpu-001" not in Quarantine.load(path).nodes
    assert apply_add(path, audit, plan) == "applied"
    entry = Quarantine.load(path).entries["gpu-001"]
    assert entry.reason == "cooling" and entry.user and entry.time > 0 and entry.run_id == ""
    assert Quarantine.load(path).entries["gpu-003"].reason == "bad fan"  # untouched
    assert [r["result"] for r in audit.read()] == ["dry-run", "applied"]
    again = plan_add(Quarantine.load(path), ["gpu-001"], SlurmView(None), "cooling")
    assert apply_add(path, audit, again) == "noop"


def test_listing_shows_slurm_state_or_unknown(tmp_path: Path) -> None:
    q = seeded(tmp_path / "q.json")
    q.entries["gpu-009"] = QuarantineEntry("gpu-009", "decommissioned")
    nodes = four_nodes(gpu_002="opsctl:launch-node-failed:slurm in run run-a")
    listing = list_quarantine(q, SlurmView({n.name: n for n in nodes}))
    got = [(n.node, n.slurm_state, n.drained_by_opsctl) for n in listing.nodes]
    assert got == [("gpu-002", "drained", True), ("gpu-003", "idle", False),
                   ("gpu-009", "not in slurm", False)]
    assert listing.nodes[0].since == "2026-12-02T16:00:00+00:00"
    assert listing.nodes[0].run_id == "run-a" and listing.nodes[0].job_id == 41
    offline = list_quarantine(q, SlurmView(None, "down"), ["gpu-003", "gpu-004"])
    assert [(n.node, n.slurm_state) for n in offline.nodes] == [("gpu-003", "unknown")]
    assert offline.to_dict()["slurm"] == {"reachable": False, "error": "down"}
