"""`opsctl lab inject NODE slow_rail=...|bad_cable=PEER|nvlink_fabric=...` and `lab heal`: the fabric
faults land next to the machine's hardware state, where its simulated ib_write_bw reads them
through the machine's default state link (state.json), and heal undoes them on both ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opsctl.errors import UsageError
from opsctl.hwsim import fabric_tools
from opsctl.hwsim import state as hwstate
from opsctl.lab import faults, labsim
from opsctl.lab.config import LabConfig
from opsctl.parsers.perftest_bw import parse_perftest_bw
from opsctl.sim.cluster import free_ports

REPO = Path(__file__).resolve().parents[3]
NODES = ("gpu-001", "gpu-002", "gpu-003")


@pytest.fixture
def cfg(tmp_path: Path) -> LabConfig:
    """A lab's host-side hardware state, as `lab up` leaves it (labsim.install, without machines)."""
    c = LabConfig(gpu_nodes=3, state_dir=tmp_path / "state")
    for n in NODES:
        d = labsim.host_state_dir(c, n)
        hwstate.ensure_node(d, n)
        (d / "state.json").symlink_to(f"{n}.json")
    return c


def _default_state(cfg: LabConfig, node: str) -> Path:
    return labsim.host_state_dir(cfg, node) / "state.json"  # what the machine's shims read


def _rail_gbps(cfg: LabConfig, client: str, server: str, hca: str) -> float | None:
    """One simulated ib_write_bw pair on loopback, each end reading its machine's default state."""
    (port,) = free_ports(1)
    args = [sys.executable, "-m", "opsctl.hwsim.tools", "ib_write_bw", "-d", hca, "-p", str(port),
            "-F", "--report_gbits"]  # fmt: skip

    def env(node: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO), "HWSIM_STATE": str(_default_state(cfg, node))}

    srv = subprocess.Popen(args, env=env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            cli = subprocess.run([*args, "127.0.0.1"], env=env(client), capture_output=True, text=True,
                                 timeout=30, check=False)  # fmt: skip
            if "Couldn't connect" not in cli.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # the server is not listening yet
        srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
    assert cli.returncode == 0, cli.stderr
    return parse_perftest_bw(cli.stdout).average_gbps()


def test_slow_rail_reaches_the_machines_ib_write_bw_and_heal_undoes_it(cfg: LabConfig) -> None:
    result = faults.inject(cfg, "gpu-002", "slow_rail=mlx5_3,gbps=180")
    assert (result.node, result.action, result.slurmd) == ("gpu-002", "inject", None)
    assert result.active_faults == ["slow_rail=mlx5_3,gbps=180"]
    slow = _rail_gbps(cfg, "gpu-001", "gpu-002", "mlx5_3")
    assert slow is not None and slow <= 180
    healthy = _rail_gbps(cfg, "gpu-001", "gpu-002", "mlx5_2")
    assert healthy is not None and healthy > 360
    healed = faults.heal(cfg, "gpu-002")
    assert healed.active_faults == []
    assert not fabric_tools.fabric_path(_default_state(cfg, "gpu-002")).exists()
    after = _rail_gbps(cfg, "gpu-001", "gpu-002", "mlx5_3")
    assert after is not None and after > 360


def test_bad_cable_names_its_peer_and_heal_of_either_end_clears_both(cfg: LabConfig) -> None:
    result = faults.inject(cfg, "gpu-001", "bad_cable=gpu-003,gbps=40")
    assert result.active_faults == ["bad_cable=gpu-003,gbps=40"]
    assert fabric_tools.load_faults(_default_state(cfg, "gpu-003")).links == {"gpu-001": 40.0}
    faults.heal(cfg, "gpu-003")
    for n in ("gpu-001", "gpu-003"):
        assert fabric_tools.load_faults(_default_state(cfg, n)) == fabric_tools.FabricFaults()


def test_nvlink_fabric_fault_is_listed_with_the_hardware_faults(cfg: LabConfig) -> None:
    faults.inject(cfg, "gpu-001", "xid=79")
    result = faults.inject(cfg, "gpu-001", "nvlink_fabric=In Progress")
    assert result.active_faults == ["xid=79", "nvlink_fabric=In Progress"]
    assert faults.heal(cfg, "gpu-001").active_faults == []
    assert fabric_tools.load_faults(_default_state(cfg, "gpu-001")).nvlink_fabric == ""


@pytest.mark.parametrize(
    ("node", "spec", "match"),
    [
        ("gpu-001", "slow_rail=mlx5_9", "no HCA 'mlx5_9'"),
        ("gpu-001", "slow_rail=mlx5_1,gbps=fast", "gbps must be a number"),
        ("gpu-001", "bad_cable", "needs the other end"),
        ("gpu-001", "bad_cable=gpu-001", "no cable to itself"),
        ("gpu-001", "bad_cable=head-01", "head"),
        ("gpu-001", "bad_cable=gpu-009", "no lab machine named"),
        ("head-01", "slow_rail=mlx5_3", "head"),
    ],
)
def test_bad_fabric_specs_are_usage_errors_and_change_nothing(
    cfg: LabConfig, node: str, spec: str, match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        faults.inject(cfg, node, spec)
    for n in NODES:
        assert not fabric_tools.fabric_path(_default_state(cfg, n)).exists()
