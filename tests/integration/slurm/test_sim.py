"""The simulated cluster itself: lifecycle, fault injection, add-ons, clean teardown, 64 nodes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import load_config
from opsctl.sim.addons import ADDONS
from opsctl.sim.cluster import SimCluster
from opsctl.sim.procs import is_running

pytestmark = pytest.mark.integration


def _pids(cluster: SimCluster) -> list[int]:
    return [p.pid for p in cluster.status().processes]


class _MarkerAddon:
    """A minimal add-on: a managed process plus a file, to prove the hooks run."""

    name = "marker"

    def start(self, sim: SimCluster) -> None:
        sim.spawn("marker-sleep", ["sleep", "600"])
        (sim.state_dir / "marker").write_text("started")
        sim.set_config("prometheus", url="http://127.0.0.1:19090")

    def stop(self, sim: SimCluster) -> None:
        (sim.state_dir / "marker").write_text("stopped")

    def status(self, sim: SimCluster) -> dict[str, Any]:
        return {"marker": (sim.state_dir / "marker").read_text()}


def test_cli_up_status_down_leaves_nothing_running(run_opsctl, tmp_path: Path) -> None:
    state = tmp_path / "s"
    up = run_opsctl("sim", "up", "--nodes", "2", "--state-dir", str(state))
    cluster = SimCluster(state_dir=state)
    try:
        assert up.returncode == 0, up.stderr
        exports = f"export SLURM_CONF={state / 'etc' / 'slurm.conf'} OPSCTL_CONFIG={state / 'opsctl.toml'}"
        assert exports in up.stdout
        status = run_opsctl("sim", "status", "--json", "--state-dir", str(state))
        assert status.returncode == 0
        report = json.loads(status.stdout)
        assert report["running"] and report["nodes"] == ["gpu-001", "gpu-002"]
        names = {p["name"] for p in report["processes"]}
        assert names == {"munged", "slurmctld", "slurmd-gpu-001", "slurmd-gpu-002"}
        pids = _pids(cluster)
        again = run_opsctl("sim", "up", "--nodes", "2", "--state-dir", str(state))  # idempotent
        assert again.returncode == 0 and _pids(cluster) == pids
        other_size = run_opsctl("sim", "up", "--nodes", "3", "--state-dir", str(state))
        assert other_size.returncode == 2 and "already running" in other_size.stderr
        # A job's processes (slurmstepd runs in its own session) must not survive `sim down`.
        sbatch = ["sbatch", "--parsable", "-N1", "--output=/dev/null", f"--chdir={state}",
                  "--wrap", "sleep 600"]
        job = subprocess.run(sbatch, capture_output=True, text=True, env=cluster.env, check=True)
        assert job.stdout.strip().isdigit()
        down = run_opsctl("sim", "down", "--state-dir", str(state))
        assert down.returncode == 0
        assert not any(is_running(pid) for pid in pids)
        leftover = subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True, text=True, check=False)
        for pid in leftover.stdout.split():
            cwd = Path(f"/proc/{pid}/cwd")
            assert not (cwd.exists() and str(cwd.resolve()).startswith(str(state))), "job process survived"
        assert run_opsctl("sim", "status", "--state-dir", str(state)).returncode == 1
        assert run_opsctl("sim", "down", "--state-dir", str(state)).returncode == 0  # idempotent
    finally:
        cluster.down()


def test_stop_and_start_one_slurmd(sim_factory) -> None:
    cluster = sim_factory(nodes=2, slurmd_timeout=5)
    cluster.stop_slurmd("gpu-002")
    assert not cluster.slurmd_running("gpu-002") and cluster.slurmd_running("gpu-001")
    states = cluster.wait_for(lambda s: s.get("gpu-002", "").endswith("*") or s.get("gpu-002") == "down",
                              120, "gpu-002 to stop responding")
    assert states["gpu-001"] == "idle"
    cluster.start_slurmd("gpu-002")
    cluster.reset()
    assert cluster.sinfo_states() == {"gpu-001": "idle", "gpu-002": "idle"}


def test_addons_start_and_stop_with_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ADDONS, "marker", _MarkerAddon)
    cluster = SimCluster(nodes=1, state_dir=tmp_path / "a", addons=["marker"])
    with cluster:
        assert (cluster.state_dir / "marker").read_text() == "started"
        assert cluster.status().addons == {"marker": {"marker": "started"}}
        config = load_config(cluster.config_path)  # add-ons extend the sim's opsctl.toml
        assert config.prometheus.url == "http://127.0.0.1:19090"
        assert config.slurm.slurm_conf == str(cluster.slurm_conf) and config.slurm.partition == "gpu"
        pid = next(p.pid for p in cluster.status().processes if p.name == "marker-sleep")
        assert is_running(pid)
    assert (cluster.state_dir / "marker").read_text() == "stopped"
    assert not is_running(pid)


def test_unknown_addon_fails_cleanly(run_opsctl, tmp_path: Path) -> None:
    result = run_opsctl("sim", "up", "--nodes", "1", "--with", "nosuch", "--state-dir", str(tmp_path / "u"))
    assert result.returncode == 2 and "unknown sim add-on" in result.stderr
    assert "Traceback" not in result.stderr
    assert SimCluster(state_dir=tmp_path / "u").status().processes == []


def test_sixty_four_nodes(sim_factory, run_opsctl, record_property) -> None:
    cluster = sim_factory(nodes=64)
    result = run_opsctl("nodes", "--json", env=cluster.env_vars)
    assert result.returncode == 0, result.stderr
    nodes = json.loads(result.stdout)
    assert len(nodes) == 64 and sum(n["gpus_total"] for n in nodes) == 512
    assert all(n["state"] == "idle" for n in nodes)
    status = cluster.status()
    assert len(status.processes) == 66 and all(p.alive for p in status.processes)
    # Memory of the whole simulated cluster (munged + slurmctld + 64 slurmd), for the report.
    record_property("sim64_rss_mib", round(status.rss_kib / 1024))
    print(f"64-node sim RSS: {status.rss_kib / 1024:.0f} MiB")
    # The blast-radius limit at 64 nodes is 6 (10%): 6 drain, the 7th is refused.
    ok = run_opsctl("drain", "gpu-[001-006]", "--reason", "scale test", env=cluster.env_vars)
    assert ok.returncode == 0, ok.stderr
    refused = run_opsctl("drain", "gpu-007", "--reason", "scale test", env=cluster.env_vars)
    assert refused.returncode == 2
    assert run_opsctl("resume", "gpu-[001-006]", env=cluster.env_vars).returncode == 0


def test_a_port_taken_after_choosing_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another cluster may bind a port between our choice and slurmd's bind: up() retries."""
    import socket

    import opsctl.sim.cluster as cluster_module

    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("0.0.0.0", 0))
    blocker.listen()
    real_free_ports = cluster_module.free_ports
    calls: list[int] = []

    def first_choice_collides(count: int) -> list[int]:
        ports = real_free_ports(count)
        calls.append(count)
        if len(calls) == 1:
            ports[-1] = blocker.getsockname()[1]  # the last slurmd's port is already taken
        return ports

    monkeypatch.setattr(cluster_module, "free_ports", first_choice_collides)
    try:
        with SimCluster(nodes=2, state_dir=tmp_path / "p") as cluster:
            assert len(calls) == 2
            assert cluster.sinfo_states() == {"gpu-001": "idle", "gpu-002": "idle"}
    finally:
        blocker.close()
