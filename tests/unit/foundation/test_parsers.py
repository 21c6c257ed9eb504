"""Parsers against genuine output: the vendored real-world fixtures and Slurm 22.05.8 captures."""

from __future__ import annotations

import json
from pathlib import Path

from opsctl.slurm import openapi_v0038, text

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"
DATA = Path(__file__).resolve().parent / "data"


def test_sinfo_all_real_world_fixture() -> None:
    nodes = {n.name: n for n in text.parse_sinfo_all((REAL / "sinfo-N-o-all.anonymized.gcm.txt").read_text())}
    assert sorted(nodes) == ["node0201", "node1537", "node4180"]
    drained = nodes["node0201"]
    assert (drained.state, drained.flags) == ("idle", {"DRAIN", "NOT_RESPONDING"})
    assert drained.reason == "replace" and drained.reason_user == "root"
    assert (drained.gpus_total, drained.gpu_type) == (8, "gen")
    assert drained.partitions == ["partition"]  # two rows, one partition: merged
    assert drained.display_state == "drained*"
    busy = nodes["node1537"]
    assert (busy.state, busy.flags, busy.reason, busy.reason_user) == ("allocated", set(), "", "")
    assert nodes["node4180"].gpus_total == 2
    assert drained.cpus == 80


def test_scontrol_show_job_real_world_fixture_multiline() -> None:
    jobs = text.parse_jobs((REAL / "scontrol-show-job.anonymized.gcm.txt").read_text())
    assert len(jobs) == 1
    job = jobs[0]
    assert job.job_id == 30214
    assert job.name == "demo_ods"
    assert job.state == "RUNNING"
    assert job.nodes == ["node1751"]
    assert (job.exit_code, job.exit_signal) == (0, 0)
    assert job.restarts == 0 and job.requeue is True
    assert job.partition == "learn"
    assert job.user == "test_username"
    # TresPerNode says gres/gpu:0 upstream; JOB_GRES carries the 8 GPUs the job holds.
    assert job.gpus_per_node == 8
    assert job.reason == ""


def test_tokenizer_keeps_values_with_spaces_and_odd_keys() -> None:
    fields = text.tokenize("JobId=5 AllocNode:Sid=host:12 CPUs/Task=1 OS=Linux 6.1 #1 SMP Power= Comment=a b")
    assert fields["AllocNode:Sid"] == "host:12"
    assert fields["CPUs/Task"] == "1"
    assert fields["OS"] == "Linux 6.1 #1 SMP"
    assert fields["Power"] == ""
    assert fields["Comment"] == "a b"


def test_scontrol_node_22_05_capture() -> None:
    nodes = {n.name: n for n in text.parse_nodes((DATA / "scontrol-d-o-show-node.22.05.8.txt").read_text())}
    assert sorted(nodes) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert all(n.gpus_total == 8 and n.gpu_type == "h200" for n in nodes.values())
    assert nodes["gpu-001"].state == "mixed" and nodes["gpu-001"].gpus_alloc == 8
    assert nodes["gpu-002"].flags == {"DRAIN"}
    assert nodes["gpu-002"].reason == "opsctl: xid 79 on GPU 3"
    assert nodes["gpu-002"].reason_user == "root"
    assert nodes["gpu-002"].drained_by_opsctl
    # A reason containing '=' and ',' survives whole thanks to the [user@time] terminator.
    assert nodes["gpu-004"].reason == "operator: fan=loud, check PSU"
    assert not nodes["gpu-004"].drained_by_opsctl
    assert nodes["gpu-003"].partitions == ["gpu"]


def test_scontrol_node_multiline_capture() -> None:
    (node,) = text.parse_nodes((DATA / "scontrol-show-node.multiline.22.05.8.txt").read_text())
    assert node.name == "gpu-002" and node.reason == "opsctl: xid 79 on GPU 3" and node.drain_flag


def test_scontrol_job_22_05_capture() -> None:
    jobs = {j.job_id: j for j in text.parse_jobs((DATA / "scontrol-o-show-job.22.05.8.txt").read_text())}
    assert jobs[1].state == "RUNNING" and jobs[1].nodes == ["gpu-001", "gpu-003"]
    assert jobs[1].gpus_per_node == 8 and jobs[1].requeue
    assert jobs[2].state == "FAILED" and jobs[2].exit_code == 3 and jobs[2].reason == "NonZeroExitCode"
    assert jobs[3].state == "PENDING" and jobs[3].nodes == []
    assert jobs[3].reason.startswith("ReqNodeNotAvail")


def test_openapi_v0038_matches_text() -> None:
    sinfo = json.loads((DATA / "sinfo-json.22.05.8.json").read_text())
    squeue = json.loads((DATA / "squeue-json.22.05.8.json").read_text())
    assert sinfo["meta"]["plugin"]["type"] == openapi_v0038.PLUGIN
    from_json = {n.name: n for n in openapi_v0038.parse_sinfo(sinfo)}
    node_text = (DATA / "scontrol-d-o-show-node.22.05.8.txt").read_text()
    from_text = {n.name: n for n in text.parse_nodes(node_text)}
    for name, node in from_text.items():
        other = from_json[name]
        assert (other.state, other.flags, other.reason, other.reason_user) == (
            node.state, node.flags, node.reason, node.reason_user)
        assert (other.gpus_total, other.gpus_alloc) == (node.gpus_total, node.gpus_alloc)
        assert other.gpu_type == node.gpu_type
    jobs_json = {j.job_id: j for j in openapi_v0038.parse_squeue(squeue)}
    jobs_text = {j.job_id: j for j in text.parse_jobs((DATA / "scontrol-o-show-job.22.05.8.txt").read_text())}
    assert jobs_json.keys() == jobs_text.keys()
    for job_id, job in jobs_text.items():
        other = jobs_json[job_id]
        assert (other.state, other.nodes, other.exit_code, other.restarts) == (
            job.state, job.nodes, job.exit_code, job.restarts)
        assert (other.requeue, other.gpus_per_node) == (job.requeue, job.gpus_per_node)
