"""The simulated fabric tools: genuine formats read back by opsctl's parsers, both ends of a pair
test over real TCP, and faults that touch only what the real failure would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opsctl.hwsim import fabric_tools as ft
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.state import load, make_node, save, state_path
from opsctl.hwsim.tools import SHIM_NAMES, install_shims, main
from opsctl.parsers.nccl_tests import parse_nccl_tests
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q
from opsctl.parsers.nvidia_smi_topo import parse_nvidia_smi_topo
from opsctl.parsers.perftest_bw import parse_perftest_bw
from opsctl.sim.cluster import free_ports

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def hw(tmp_path: Path) -> Path:
    for n in ("gpu-001", "gpu-002", "gpu-003"):
        save(make_node(n), state_path(tmp_path, n))
    return tmp_path


def _tool(hw: Path, node: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    e = {**os.environ, "PYTHONPATH": str(REPO), "HWSIM_STATE": str(state_path(hw, node)), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "opsctl.hwsim.tools", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=e,
    )  # fmt: skip


def pair(hw: Path, client: str, server: str, hca: str = "mlx5_3", *extra: str) -> tuple[int, str, str, str]:
    """Run one ib_write_bw pair: (client exit, client stdout, client stderr, server stdout)."""
    (port,) = free_ports(1)
    args = ["ib_write_bw", "-d", hca, "-p", str(port), "-F", "--report_gbits", "-s", "1048576", *extra]
    srv = _tool(hw, server, *args)
    deadline = time.monotonic() + 20
    while True:
        cli = _tool(hw, client, *args, "127.0.0.1")
        out, err = cli.communicate(timeout=30)
        if cli.returncode == 0 or "Couldn't connect" not in err or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # the server is not listening yet
    try:
        sout, _ = srv.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
        sout, _ = srv.communicate()
    return cli.returncode, out, err, sout


def test_topo_matrix_reads_back_with_each_hca_next_to_its_gpu(
    hw: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["nvidia-smi", "topo", "-m", "--state", str(state_path(hw, "gpu-001"))]) == 0
    m = parse_nvidia_smi_topo(capsys.readouterr().out)
    assert m.gpus == [f"GPU{i}" for i in range(8)] and [m.nic_device(n) for n in m.nics] == [
        f"mlx5_{i}" for i in range(8)
    ]
    assert all(m.nearest_nics(f"GPU{i}")[0] == (f"mlx5_{i}", "PIX") for i in range(8))
    assert m.link("GPU0", "NIC5") == "SYS" and m.link("GPU0", "GPU7") == "NV18"
    assert (m.rows["GPU6"].cpu_affinity, m.rows["GPU6"].numa_affinity) == ("56-111,168-223", 1)
    node = load(state_path(hw, "gpu-001"))
    apply_fault(node, "gpu_missing=2")
    apply_fault(node, "nvlink_down,gpu=4,link=3")
    save(node, state_path(hw, "gpu-001"))
    assert main(["nvidia-smi", "topo", "-m", "--state", str(state_path(hw, "gpu-001"))]) == 0
    m = parse_nvidia_smi_topo(capsys.readouterr().out)
    assert len(m.gpus) == 7 and m.link("GPU0", "GPU3") == "NV17"  # GPU3 is the old GPU4


def test_nvlink_fabric_fault_shows_in_nvidia_smi_q_and_heals(
    hw: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = state_path(hw, "gpu-002")
    assert main(["fabric", str(f), "nvlink_fabric=In Progress"]) == 0
    assert main(["nvidia-smi", "-q", "--state", str(f)]) == 0
    gpus = parse_nvidia_smi_q(capsys.readouterr().out).gpus
    assert {(g.fabric_state, g.fabric_status) for g in gpus} == {("In Progress", "N/A")}
    assert main(["fabric", str(f), "--heal"]) == 0 and not ft.fabric_path(f).exists()
    assert main(["nvidia-smi", "-q", "--state", str(f)]) == 0
    assert {g.fabric_state for g in parse_nvidia_smi_q(capsys.readouterr().out).gpus} == {"Completed"}


def test_fabric_fault_errors_change_nothing(hw: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = state_path(hw, "gpu-001")
    assert main(["fabric", str(f), "bad_cable"]) == 2 and "--peer" in capsys.readouterr().err
    assert main(["fabric", str(f), "slow_rail=mlx5_9"]) == 2
    assert main(["fabric", str(f), "nvlink_fabric=Completed"]) == 2
    assert main(["fabric", str(f), "slow_rail=mlx5_1,gbps=fast"]) == 2
    assert main(["fabric", str(f), "melted"]) == 2 and "unknown fabric fault" in capsys.readouterr().err
    assert not ft.fabric_path(f).exists()


def test_a_healthy_pair_runs_at_ndr_speed_in_perftests_format(hw: Path) -> None:
    rc, out, err, server = pair(hw, "gpu-001", "gpu-002", "mlx5_3", "--use_cuda=3", "--use_cuda_dmabuf")
    assert rc == 0, err
    r = parse_perftest_bw(out)
    assert (r.test, r.device, r.link_type, r.unit, r.cuda_device) == (
        "RDMA_Write BW Test",
        "mlx5_3",
        "IB",
        "Gb",
        3,
    )
    assert r.cuda_device_name == "NVIDIA H200"
    assert 390 < (r.average_gbps() or 0) <= 392.4
    assert r.local_lid == load(state_path(hw, "gpu-001")).hca("mlx5_3").lid
    assert r.remote_lid == load(state_path(hw, "gpu-002")).hca("mlx5_3").lid
    s = parse_perftest_bw(server)
    assert s.rows == [] and s.test == "RDMA_Write BW Test" and "Waiting for client to connect" in server


def test_a_slow_rail_shows_with_every_partner_and_only_on_that_rail(hw: Path) -> None:
    ft.apply_fabric_fault(state_path(hw, "gpu-002"), "slow_rail=mlx5_3,gbps=180")
    for client in ("gpu-001", "gpu-003"):
        _, out, _, _ = pair(hw, client, "gpu-002", "mlx5_3")
        assert parse_perftest_bw(out).average_gbps() == pytest.approx(180, abs=0.5)
    _, out, _, _ = pair(hw, "gpu-001", "gpu-002", "mlx5_4")
    assert (parse_perftest_bw(out).average_gbps() or 0) > 390


def test_a_bad_cable_shows_only_between_its_two_nodes(hw: Path) -> None:
    ft.apply_fabric_fault(state_path(hw, "gpu-001"), "bad_cable,gbps=40", state_path(hw, "gpu-002"))
    assert ft.load_faults(state_path(hw, "gpu-002")).links == {"gpu-001": 40.0}
    _, out, _, _ = pair(hw, "gpu-002", "gpu-001", "mlx5_0")
    assert parse_perftest_bw(out).average_gbps() == pytest.approx(40, abs=0.2)
    for a, b in (("gpu-001", "gpu-003"), ("gpu-003", "gpu-002")):
        _, out, _, _ = pair(hw, a, b, "mlx5_0")
        assert (parse_perftest_bw(out).average_gbps() or 0) > 390
    ft.heal_fabric(state_path(hw, "gpu-001"), state_path(hw, "gpu-002"))
    assert ft.load_faults(state_path(hw, "gpu-002")).links == {}


def test_a_down_port_or_a_missing_server_fails_as_perftest_does(hw: Path) -> None:
    node = load(state_path(hw, "gpu-002"))
    apply_fault(node, "ib_down=mlx5_5")
    save(node, state_path(hw, "gpu-002"))
    rc, _, err, _ = pair(hw, "gpu-001", "gpu-002", "mlx5_5")
    assert rc == 1 and "Unable to Connect the HCA's through the link" in err
    (port,) = free_ports(1)
    cli = _tool(hw, "gpu-001", "ib_write_bw", "-d", "mlx5_0", "-p", str(port), "127.0.0.1")
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 1 and f"Couldn't connect to 127.0.0.1:{port}" in err
    cli = _tool(hw, "gpu-001", "ib_write_bw", "-d", "mlx5_9", "127.0.0.1")
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 1 and "IB device mlx5_9 not found" in err


def test_all_reduce_on_one_node(hw: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = str(state_path(hw, "gpu-001"))
    assert main(["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "8", "--state", f]) == 0
    (r,) = parse_nccl_tests(capsys.readouterr().out)
    assert (r.collective, r.version, r.n_gpus, len(r.ranks), len(r.rows)) == (
        "all_reduce_perf",
        "2.17.8",
        8,
        8,
        4,
    )
    assert r.ranks[3].bus == "0000:5d:00" and r.ranks[3].name == "NVIDIA H200"
    assert 470 < (r.busbw_at_largest() or 0) < 480 and r.complete and r.wrong_total() == 0
    node = load(f)
    apply_fault(node, "nvlink_down,gpu=1,link=0")
    apply_fault(node, "nvlink_down,gpu=1,link=1")
    save(node, f)
    assert main(["all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8", "--state", f]) == 0
    (r,) = parse_nccl_tests(capsys.readouterr().out)
    assert (r.busbw_at_largest() or 0) < 431  # two NVLinks down of 18 on one GPU
    ft.apply_fabric_fault(f, "nvlink_fabric=Not Started")
    assert main(["all_reduce_perf", "-g", "8", "--state", f]) == 1
    (r,) = parse_nccl_tests(capsys.readouterr().out)
    assert not r.complete and "system not yet initialized" in r.failures[0]
    apply_fault(node, "gpu_missing=7")
    save(node, f)
    ft.heal_fabric(f)
    assert main(["all_reduce_perf", "-g", "8", "--state", f]) == 1
    assert "Invalid number of GPUs: 8 requested but only 7 were found." in capsys.readouterr().err


def test_all_reduce_under_srun_reports_the_whole_job_from_rank_0(hw: Path) -> None:
    env = {"SLURM_NTASKS": "3", "SLURM_JOB_NODELIST": "gpu-[001-003]", "HWSIM_STATE_DIR": str(hw)}
    ft.apply_fabric_fault(state_path(hw, "gpu-003"), "slow_rail=mlx5_2,gbps=200")
    outs = []
    for rank in range(3):
        p = _tool(
            hw,
            "gpu-001",
            "all_reduce_perf",
            "-b",
            "8G",
            "-e",
            "8G",
            "-g",
            "8",
            env={**env, "SLURM_PROCID": str(rank)},
        )
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out)
    assert outs[1] == outs[2] == ""
    (r,) = parse_nccl_tests(outs[0])
    assert len(r.ranks) == 24 and r.hosts == ["gpu-001", "gpu-002", "gpu-003"]
    # the slow rail paces the ring: 8 rails x 200 Gb/s = 200 GB/s, times the ring's efficiency
    assert (r.busbw_at_largest() or 0) < 200


@pytest.mark.skipif(
    shutil.which("python3", path="/usr/bin") is None, reason="needs Debian's /usr/bin/python3"
)
def test_the_fabric_shims_install_and_run_on_a_bare_python(hw: Path, tmp_path: Path) -> None:
    scripts = install_shims(tmp_path / "bin", tmp_path / "lib", python="/usr/bin/python3 -I")
    assert {"ib_write_bw", "all_reduce_perf"} <= {p.name for p in scripts} and "ib_write_bw" in SHIM_NAMES
    done = subprocess.run(
        [str(tmp_path / "bin" / "all_reduce_perf"), "-g", "8", "--state", str(state_path(hw, "gpu-001"))],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert parse_nccl_tests(done.stdout)[0].complete


def _rank_on_its_own_machine(
    tmp_path: Path, hw: Path, node: str, rank: int, env: dict[str, str]
) -> subprocess.Popen[str]:
    """A rank whose machine holds only its own node's state (as each lab machine does)."""
    own = tmp_path / f"machine-{node}"
    own.mkdir(exist_ok=True)
    for suffix in (".json", ".fabric.json"):
        if (hw / f"{node}{suffix}").exists():
            shutil.copy2(hw / f"{node}{suffix}", own / f"{node}{suffix}")
    e = {**os.environ, "PYTHONPATH": str(REPO), "HWSIM_STATE": str(own / f"{node}.json"),
         "SLURM_PROCID": str(rank), **env}  # fmt: skip
    e.pop("HWSIM_STATE_DIR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "opsctl.hwsim.tools", "all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
    )  # fmt: skip


def test_all_reduce_across_separate_machines_meets_at_rank_0_over_tcp(hw: Path, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env = {"SLURM_NTASKS": "3", "SLURM_STEP_NODELIST": "gpu-[001-003]",
           "HWSIM_BOOTSTRAP_HOST": "127.0.0.1", "HWSIM_BOOTSTRAP_PORT": str(port)}  # fmt: skip
    ft.apply_fabric_fault(state_path(hw, "gpu-003"), "slow_rail=mlx5_2,gbps=200")
    procs = [_rank_on_its_own_machine(tmp_path, hw, f"gpu-00{r + 1}", r, env) for r in (2, 1, 0)]
    outs = {}
    for r, p in zip((2, 1, 0), procs, strict=True):
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs[r] = out
    assert outs[1] == outs[2] == ""
    (r,) = parse_nccl_tests(outs[0])
    assert len(r.ranks) == 24 and r.hosts == ["gpu-001", "gpu-002", "gpu-003"]
    # gpu-003's slow rail, known only on its own machine, paces the ring
    assert (r.busbw_at_largest() or 0) < 200


def test_all_reduce_fails_like_ncclbootstrap_when_a_rank_never_arrives(hw: Path, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env = {"SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "gpu-[001-002]", "HWSIM_BOOTSTRAP_HOST": "127.0.0.1",
           "HWSIM_BOOTSTRAP_PORT": str(port), "HWSIM_BOOTSTRAP_TIMEOUT": "1"}  # fmt: skip
    p = _rank_on_its_own_machine(tmp_path, hw, "gpu-001", 0, env)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1 and out == ""
    assert "Bootstrap : ranks [1] did not connect within 1s" in err
    assert "Traceback" not in err
