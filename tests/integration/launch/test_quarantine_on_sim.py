"""`opsctl quarantine` through the real `python -m opsctl` against the session's 4-node simulated
Slurm (real munged, slurmctld, slurmd): a quarantined node is left out of `launch rl-run`, a
released one is placed again, every change is audited, and bad input changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from launch_sim_helpers import DEMO, ROOT, launch_toml

from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration


@dataclass
class Site:
    sim: SimCluster
    config: Path
    quarantine: Path
    audit: Path

    def opsctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.sim.env, "OPSCTL_CONFIG": str(self.config)}
        return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=180, check=False)

    def dry_run(self, nodes: int) -> subprocess.CompletedProcess[str]:
        return self.opsctl("launch", "rl-run", "--job", str(DEMO), "--dry-run", "--nodes", str(nodes),
                           "--output", str(self.config.parent / "runs" / "q"))

    def audit_records(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.audit.read_text().splitlines()] if self.audit.exists() else []


@pytest.fixture
def site(sim4: SimCluster, tmp_path: Path) -> Iterator[Site]:
    """The session's sim with an opsctl.toml of this test's own: its quarantine file and audit log."""
    audit = tmp_path / "audit.jsonl"
    shared = f"log = {json.dumps(str(sim4.audit_log))}"
    text = sim4.config_path.read_text()
    assert shared in text
    config = tmp_path / "opsctl.toml"
    config.write_text(text.replace(shared, f"log = {json.dumps(str(audit))}") + launch_toml(tmp_path))
    try:
        yield Site(sim4, config, tmp_path / "quarantine.json", audit)
    finally:
        sim4.reset()  # leave the shared cluster as we found it, whatever failed


def assert_one_line_error(out: subprocess.CompletedProcess[str], text: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith("opsctl: error: ") and text in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr + out.stdout


def test_quarantine_keeps_a_node_out_of_launches_until_released(site: Site) -> None:
    empty = site.opsctl("quarantine", "list")
    assert empty.returncode == 0 and empty.stdout.startswith("no nodes quarantined"), empty

    added = site.opsctl("quarantine", "add", "gpu-003", "--reason", "fan noise, ticket 4711")
    assert added.returncode == 0 and added.stdout.startswith("quarantined gpu-003"), added
    listed = json.loads(site.opsctl("quarantine", "list", "--json").stdout)
    assert listed["slurm"]["reachable"] and [n["node"] for n in listed["nodes"]] == ["gpu-003"]
    assert listed["nodes"][0]["slurm_state"] == "idle"  # quarantined, not drained
    assert listed["nodes"][0]["reason"] == "fan noise, ticket 4711"
    table = site.opsctl("quarantine", "list").stdout
    assert "gpu-003" in table and "fan noise" in table and "idle" in table
    nodes = {n["name"]: n["quarantined"] for n in json.loads(site.opsctl("nodes", "--json").stdout)}
    assert nodes == {"gpu-001": False, "gpu-002": False, "gpu-003": True, "gpu-004": False}
    assert "idle (quarantined)" in site.opsctl("nodes", "gpu-003").stdout

    dry = site.dry_run(3)
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --exclude=gpu-003\n" in dry.stdout and "gpu-003 (quarantined)" in dry.stdout
    refused = site.dry_run(4)
    assert_one_line_error(refused, "refusing to launch: 4 nodes needed, 3 of 4")

    # Drained by opsctl too: a release says so and leaves the drain to `opsctl resume`.
    drained = site.opsctl("drain", "gpu-003", "--reason", "fan")
    assert drained.returncode == 0, drained.stderr
    released = site.opsctl("quarantine", "release", "gpu-003", "--reason", "fan replaced")
    assert released.returncode == 0, released.stderr
    assert released.stdout.startswith("released gpu-003 from the quarantine")
    assert "still drained by opsctl (release does not resume): opsctl resume gpu-003" in released.stdout
    assert site.sim.sinfo_states()["gpu-003"].startswith("drain")
    assert site.opsctl("resume", "gpu-003").returncode == 0

    listed = json.loads(site.opsctl("quarantine", "list", "--json").stdout)
    assert listed["nodes"] == []
    again = site.dry_run(4)
    assert again.returncode == 0, again.stderr
    assert "#SBATCH --nodes=4\n" in again.stdout and "--exclude" not in again.stdout

    records = [r for r in site.audit_records() if r["action"].startswith("quarantine-")]
    assert [(r["action"], r["result"], r["nodes"]) for r in records] == [
        ("quarantine-add", "applied", ["gpu-003"]), ("quarantine-release", "applied", ["gpu-003"])]
    assert records[0]["reason"] == "fan noise, ticket 4711" and records[1]["reason"] == "fan replaced"
    assert all(r["user"] and r["host"] and r["time"] for r in records)


def test_bad_requests_exit_2_and_change_nothing(site: Site) -> None:
    assert site.opsctl("quarantine", "add", "gpu-002", "--reason", "bad PSU").returncode == 0
    before, states = site.quarantine.read_bytes(), site.sim.sinfo_states()
    audited = len(site.audit_records())

    assert_one_line_error(site.opsctl("quarantine", "release", "gpu-[001-002]"), "not quarantined: gpu-001")
    assert_one_line_error(site.opsctl("quarantine", "add", "gpu-[004-005]", "--reason", "x"),
                          "unknown node(s): gpu-005")
    assert site.quarantine.read_bytes() == before
    assert [r["result"] for r in site.audit_records()[audited:]] == ["rejected", "rejected"]

    site.quarantine.write_text("{\"nodes\": [")  # a damaged file (a full disk, a bad hand edit)
    for args in (["list"], ["release", "gpu-002"], ["add", "gpu-001", "--reason", "x"]):
        assert_one_line_error(site.opsctl("quarantine", *args), "is unreadable")
    assert_one_line_error(site.dry_run(3), "is unreadable")  # launches refuse to guess either
    listing = site.opsctl("nodes", "--json")  # listing nodes still works, with a warning
    assert listing.returncode == 0 and "warning: quarantine list not read" in listing.stderr
    assert len(json.loads(listing.stdout)) == 4
    assert site.quarantine.read_text() == "{\"nodes\": ["
    assert site.sim.sinfo_states() == states


def test_an_allocation_srun_could_not_step_is_refused_and_watch_names_a_step_failure(
    site: Site, tmp_path: Path
) -> None:
    """The sim's nodes report 4 CPUs. Eight trainer ranks per node would have been submitted and
    failed only after SFT ("More processors requested than permitted"); the gate refuses at once.
    Where a step still cannot be created, `opsctl watch` names srun's reason from the job's log:
    a real job on the sim runs an srun of 16 tasks on one node."""
    site.config.write_text(site.config.read_text().replace("tasks_per_node = 1", "tasks_per_node = 8"))
    refused = site.dry_run(3)
    assert_one_line_error(refused, "refusing to launch: 3 nodes needed, 0 of 4")
    why = "gpu-001 (4 CPUs, too few for 8 trainer ranks per node ([launch] tasks_per_node))"
    assert why in refused.stderr

    from opsctl.launch.ledger import Ledger

    run = tmp_path / "runs" / "step"
    (run / "logs").mkdir(parents=True)
    script = "#!/bin/bash\nsrun --nodes=1 --ntasks=16 true\n"
    sbatch = ["sbatch", "--parsable", "-N1", "--exclusive", f"--output={run}/logs/slurm-%j.out",
              f"--chdir={run}"]
    job = int(subprocess.run(sbatch, input=script, capture_output=True, text=True, env=site.sim.env,
                             check=True, timeout=60).stdout.strip().split(";")[0])
    Ledger(run_id="step", run_dir=str(run), job_ids=[job], nodes_requested=1).save()
    watched = site.opsctl("watch", "--json", "--interval", "0.5", str(run))
    assert watched.returncode == 1, (watched.stdout, watched.stderr)
    last = json.loads(watched.stdout.splitlines()[-1])
    assert last["final_state"] == "FAILED"
    cause = (f"srun could not create a job step: More processors requested than permitted "
             f"(logs/slurm-{job}.out;")
    assert any(cause in event for event in last["events"]), last["events"]
    assert json.loads((run / "ledger.json").read_text())["failure"].startswith(cause)
