"""A lab machine reboots for real: nspawn exits 133 when the machine reboots, and the shell loop that
runs it (machines.supervised_argv) starts it again; any other exit, or a removed machine, ends it.
The loop is run here by the real shell around a command that exits as nspawn would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from opsctl.lab import machines
from opsctl.lab.config import LabConfig


def _loop(tmp_path: Path, codes: list[int]) -> tuple[int, int]:
    """Run the loop around a command that exits with `codes` in turn; (exit status, runs)."""
    cfg = LabConfig(gpu_nodes=1, state_dir=tmp_path / "state")
    machine = cfg.machine("gpu-001")
    cfg.upper_dir(machine.name).mkdir(parents=True)
    counter = tmp_path / "runs"
    counter.write_text("0")
    script = (
        f"n=$(cat {counter}); n=$((n + 1)); echo $n > {counter}; "
        f"set -- {' '.join(str(c) for c in codes)}; shift $((n - 1)); exit ${{1:-0}}"
    )
    argv = machines.supervised_argv(cfg, machine, tmp_path / "rootfs")
    nspawn_at = argv.index("systemd-nspawn")
    argv = [*argv[:nspawn_at], "sh", "-c", script]
    proc = subprocess.run(argv, timeout=30, check=False)
    return proc.returncode, int(counter.read_text())


def test_a_reboot_boots_the_machine_again_and_a_poweroff_ends_it(tmp_path: Path) -> None:
    assert _loop(tmp_path, [133, 133, 0]) == (0, 3)


def test_a_failure_is_not_retried(tmp_path: Path) -> None:
    assert _loop(tmp_path, [1, 0]) == (1, 1)


def test_a_machine_whose_upper_dir_is_gone_is_not_booted_again(tmp_path: Path) -> None:
    cfg = LabConfig(gpu_nodes=1, state_dir=tmp_path / "state")
    argv = machines.supervised_argv(cfg, cfg.machine("gpu-001"), tmp_path / "rootfs")
    nspawn_at = argv.index("systemd-nspawn")
    proc = subprocess.run([*argv[:nspawn_at], "sh", "-c", "exit 133"], timeout=30, check=False)
    assert proc.returncode == 133


def test_the_machine_binds_the_lab_repository_read_only(tmp_path: Path) -> None:
    cfg = LabConfig(gpu_nodes=1, state_dir=tmp_path / "state")
    argv = machines.nspawn_argv(cfg, cfg.machine("gpu-001"), tmp_path / "rootfs")
    assert f"--bind-ro={tmp_path / 'state' / 'repo'}:/srv/opsctl-lab-repo" in argv
