"""The pair phase with the real pair scripts and the simulated ib_write_bw over real TCP (no
SSH: each end's script runs here with that node's simulated state); and the pure pieces."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from preflight_samples import REAL_WORLD

from opsctl.checks.model import Status
from opsctl.evidence.ssh import CommandResult
from opsctl.hwsim import fabric_tools as ft
from opsctl.hwsim.state import make_node, save, state_path
from opsctl.preflight.fabric import pair_phase, pair_scripts, pair_verdicts, rail_results, split_rails
from opsctl.preflight.pairs import Pair, rounds
from opsctl.preflight.settings import PreflightSection

REPO = Path(__file__).resolve().parents[3]
RAILS = ["mlx5_0", "mlx5_1"]
P = PreflightSection(fabric_pair_timeout=60)


def test_the_scripts_are_valid_shell_and_frame_each_rail():
    cli, srv = pair_scripts(P, RAILS, [20001, 20002], [0, 1], [None, None], "10.0.0.2")
    for script in (cli, srv):
        subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    assert "--use_cuda=0 --use_cuda_dmabuf" in cli and "--use_cuda" not in srv
    assert "10.0.0.2" in cli and "10.0.0.2" not in srv and "-p 20002" in srv
    genuine = (REAL_WORLD / "perftest.ib_write_bw.client.cx7-ndr.report_gbits.txt").read_text()
    text = f"@@rail mlx5_0 rc=0\n{genuine}@@rail mlx5_1 rc=1\nCouldn't connect to 10.0.0.2:20002\n"
    parts = split_rails(text)
    assert parts["mlx5_0"][0] == 0 and "392.34" in parts["mlx5_0"][1] and parts["mlx5_1"][0] == 1
    results = rail_results(Pair("a", "b"), [*RAILS, "mlx5_2"], CommandResult(1, text), "", 360.0)
    assert [(r.rail, r.gbps, r.ok) for r in results] == [("mlx5_0", 392.34, True), ("mlx5_1", None, False),
                                                         ("mlx5_2", None, False)]  # fmt: skip
    assert "Couldn't connect" in results[1].error and results[2].error == "no output"
    slow = rail_results(Pair("a", "b"), ["mlx5_0"], CommandResult(0, text), "", 395.0)
    assert not slow[0].ok and "392.3 < 395" in slow[0].error


def listenable_ports(count: int, start: int = 20000) -> list[int]:
    """``count`` ports below the kernel's ephemeral range that nothing listens on now."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    found: list[int] = []
    for port in range(start, low):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"fewer than {count} free ports in {start}-{low}")


class LocalRunner:
    """Both ends' scripts run on this host, each with its node's simulated hardware on PATH."""

    def __init__(self, hw: Path, bin_dir: Path) -> None:
        self.hw, self.bin = hw, bin_dir
        # 2 slots x 8 rails, each checked free, and below the ephemeral range: a port there can be
        # taken at any moment as the local end of some other connection, and a server that cannot
        # listen fails its rail (this test once convicted a healthy node's mlx5_1 on a busy host)
        self.ports = listenable_ports(2 * len(RAILS))

    def _run(self, node: str, script: str) -> CommandResult:
        env = {
            **os.environ,
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HWSIM_STATE": str(state_path(self.hw, node)),
        }
        done = subprocess.run(
            ["sh", "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def __call__(self, pair: Pair, slot: int) -> list:
        ports = self.ports[slot * len(RAILS) : (slot + 1) * len(RAILS)]
        cli, srv = pair_scripts(P, RAILS, ports, [0, 1], [0, 1], "127.0.0.1")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            s = pool.submit(self._run, pair.server, srv)
            c = pool.submit(self._run, pair.client, cli)
            s.result()
            return rail_results(pair, RAILS, c.result(), "", P.fabric_rail_gbps_min)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[Path, LocalRunner, list[str]]:
    nodes = [f"gpu-{i:03d}" for i in range(1, 6)]
    hw = tmp_path / "hw"
    for n in nodes:
        save(make_node(n), state_path(hw, n))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ib_write_bw").write_text(
        f'#!/bin/sh\nexec env PYTHONPATH={REPO} {sys.executable} -m opsctl.hwsim.tools ib_write_bw "$@"\n'
    )
    (bin_dir / "ib_write_bw").chmod(0o755)
    return hw, LocalRunner(hw, bin_dir), nodes


def test_isolation_names_the_bad_rail_and_the_bad_link_after_retests(rig):
    hw, runner, nodes = rig
    first = rounds(nodes, 1)
    # a bad cable between the two nodes the first round pairs, a slow rail on a third node
    cable = first[0][0]
    slow = next(n for n in nodes if n not in cable.nodes)
    ft.apply_fabric_fault(state_path(hw, cable.client), "bad_cable,gbps=50", state_path(hw, cable.server))
    ft.apply_fabric_fault(state_path(hw, slow), "slow_rail=mlx5_1,gbps=150")
    tests, n_first, n_retest, att = pair_phase(nodes, runner, partners=1, retest_partners=2, parallel=2)
    assert n_first == len(first) == 2 and n_retest >= 1  # one partner each is not enough to tell
    assert set(att.node_rails) == {(slow, "mlx5_1")}
    a, b = sorted(cable.nodes)
    assert set(att.links) == {(a, b, rail) for rail in RAILS}
    assert att.unisolated == {}
    verdicts = {(v.node, v.code): v for v in pair_verdicts(nodes, tests, att, P.fabric_rail_gbps_min)}
    bw = verdicts[(slow, "fabric-ib-write-bw")]
    assert bw.status is Status.FAIL and bw.evidence["rails"] == ["mlx5_1"] and "mlx5_1 150 Gb/s" in bw.summary
    for end in (a, b):
        assert verdicts[(end, "fabric-ib-link")].status is Status.WARN
        assert verdicts[(end, "fabric-ib-write-bw")].status is Status.OK
    # every retest pairs a suspect with a node that had no failure
    for t in tests:
        if t.retest:
            assert slow not in t.pair.nodes and len(t.pair.nodes & cable.nodes) == 1
