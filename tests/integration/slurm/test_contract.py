"""The Slurm interface contract, run against every backend available here on a real 4-node sim.

cli-json: Slurm's `--json` output (OpenAPI v0.0.38 on 22.05); cli-text: the `scontrol -o`
fallback; pyslurm: skipped where pyslurm does not import (it needs Slurm 25.11 libraries).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsctl.drain import wait_responding
from opsctl.errors import UsageError
from opsctl.model import SubmitOptions
from opsctl.sim.cluster import SimCluster
from opsctl.slurm import pyslurm_available
from opsctl.slurm.base import SlurmBackend
from opsctl.slurm.cli import CliBackend

pytestmark = pytest.mark.integration


@pytest.fixture(params=["cli-json", "cli-text", "pyslurm"])
def backend(request: pytest.FixtureRequest, sim4: SimCluster) -> Iterator[SlurmBackend]:
    kind = request.param
    if kind == "pyslurm":
        available, why = pyslurm_available()
        if not available:
            pytest.skip(why)
        from opsctl.slurm.pyslurm_backend import PyslurmBackend

        yield PyslurmBackend(str(sim4.slurm_conf))
    else:
        yield CliBackend(str(sim4.slurm_conf), timeout=60, fmt=kind.split("-")[1])
    sim4.reset()


def wait_job(backend: SlurmBackend, job_id: int, states: set[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if backend.job(job_id).state in states:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached {states}: {backend.job(job_id)}")


def test_nodes_report_eight_h200_each(backend: SlurmBackend, sim4: SimCluster) -> None:
    nodes = backend.nodes()
    assert [n.name for n in nodes] == sim4.node_names
    for node in nodes:
        assert (node.state, node.flags, node.gpus_total, node.gpus_alloc) == ("idle", set(), 8, 0)
        assert node.gpu_type == "h200"
        assert node.partitions == ["gpu"] and node.jobs == []


def test_selecting_nodes_and_unknown_names(backend: SlurmBackend) -> None:
    assert [n.name for n in backend.nodes(["gpu-003", "gpu-001"])] == ["gpu-003", "gpu-001"]
    with pytest.raises(UsageError, match="gpu-099"):
        backend.nodes(["gpu-001", "gpu-099"])


def test_drain_and_resume(backend: SlurmBackend) -> None:
    backend.drain(["gpu-002", "gpu-003"], "opsctl: contract test")
    drained = {n.name: n for n in backend.nodes(["gpu-002", "gpu-003"])}
    for node in drained.values():
        assert node.drain_flag and node.reason == "opsctl: contract test" and node.reason_user == "root"
        assert node.display_state == "drained"
    backend.resume(["gpu-002", "gpu-003"])
    for node in backend.nodes(["gpu-002", "gpu-003"]):
        # slurmctld flags resumed nodes NOT_RESPONDING until its next ping answers.
        assert node.state == "idle" and node.flags <= {"NOT_RESPONDING"} and node.reason == ""
    assert wait_responding(backend, ["gpu-002", "gpu-003"]) == []
    assert all(not n.flags for n in backend.nodes(["gpu-002", "gpu-003"]))


def test_a_drained_node_marked_down_stays_drained_and_resumes(backend: SlurmBackend) -> None:
    backend.drain(["gpu-004"], "opsctl: contract test")
    backend.mark_down(["gpu-004"], "opsctl: contract test")
    (node,) = backend.nodes(["gpu-004"])
    assert node.state == "down" and node.drain_flag and node.reason == "opsctl: contract test", node
    assert node.out_of_service and node.drained_by_opsctl  # still opsctl's drain
    backend.resume(["gpu-004"])
    assert wait_responding(backend, ["gpu-004"]) == []
    (node,) = backend.nodes(["gpu-004"])
    assert (node.state, node.flags, node.reason) == ("idle", set(), "")


def test_submit_job_info_requeue_cancel(backend: SlurmBackend, sim4: SimCluster, tmp_path: Path) -> None:
    options = SubmitOptions(job_name="contract", nodes=2, nodelist=["gpu-001", "gpu-002"], gres="gpu:h200:8",
                            requeue=True, output=str(tmp_path / "out-%j.txt"), chdir=str(tmp_path))
    job_id = backend.submit("#!/bin/bash\nsleep 300\n", options)
    wait_job(backend, job_id, {"RUNNING"})
    job = backend.job(job_id)
    assert (job.name, job.nodes, job.requeue, job.restarts, job.gpus_per_node) == (
        "contract", ["gpu-001", "gpu-002"], True, 0, 8)
    busy = {n.name: n for n in backend.nodes()}
    assert busy["gpu-001"].jobs == [job_id] and busy["gpu-001"].gpus_alloc == 8
    assert busy["gpu-003"].jobs == []
    assert job_id in [j.job_id for j in backend.jobs()]
    backend.requeue(job_id)
    requeued = backend.job(job_id)
    assert requeued.restarts == 1 and requeued.state in {"COMPLETING", "PENDING", "REQUEUED", "RUNNING"}
    backend.cancel(job_id)
    wait_job(backend, job_id, {"CANCELLED"})


def test_exit_code_and_exclude(backend: SlurmBackend, tmp_path: Path) -> None:
    options = SubmitOptions(job_name="fails", exclude=["gpu-001", "gpu-002", "gpu-003"], requeue=False,
                            output=str(tmp_path / "out-%j.txt"), chdir=str(tmp_path),
                            environment={"OPSCTL_TEST_CODE": "7"})
    job_id = backend.submit('#!/bin/bash\nexit "$OPSCTL_TEST_CODE"\n', options)
    wait_job(backend, job_id, {"FAILED"})
    job = backend.job(job_id)
    assert job.exit_code == 7 and job.nodes == ["gpu-004"] and job.requeue is False and job.finished


def test_unknown_job(backend: SlurmBackend) -> None:
    with pytest.raises(UsageError):
        backend.job(987654)
