"""The tool shims: argument handling, exit codes, and the installed form under a bare python3."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.state import NodeHardware, load, save
from opsctl.hwsim.tools import SHIM_NAMES, install_shims, main
from opsctl.parsers.dcgmi_json import parse_dcgmi_diag
from opsctl.parsers.ibstat import parse_ibstat
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q


@pytest.fixture
def state_file(tmp_path: Path, node: NodeHardware) -> Path:
    path = tmp_path / "state.json"
    save(node, path)
    return path


def test_tools_by_subcommand(state_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nvidia-smi", "-q", "--state", str(state_file)]) == 0
    assert parse_nvidia_smi_q(capsys.readouterr().out).attached_gpus == 8
    assert main(["ibstat", "--state", str(state_file), "mlx5_3"]) == 0
    assert [ca.name for ca in parse_ibstat(capsys.readouterr().out).cas] == ["mlx5_3"]
    assert main(["perfquery", "-x", "-C", "mlx5_1", "-P", "1", "--state", str(state_file)]) == 0
    assert "PortXmitData:" in capsys.readouterr().out
    assert main(["dcgmi", "--state", str(state_file), "diag", "-r", "1", "-j"]) == 0
    assert parse_dcgmi_diag(capsys.readouterr().out).results


def test_state_from_environment(
    state_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HWSIM_STATE", str(state_file))
    assert main(["health", "-c", "-j"], prog="dcgmi") == 0
    assert json.loads(capsys.readouterr().out)["body"]["Overall Health"]["value"] == "Healthy"


def test_errors_are_one_line_with_the_tools_exit_codes(
    state_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ibstat", "--state", str(state_file), "mlx5_9"]) == 255
    assert "mlx5_9" in capsys.readouterr().err
    assert main(["nvidia-smi", "-q", "--state", str(tmp_path / "absent.json")]) == 2
    assert "no simulated hardware state" in capsys.readouterr().err
    hw = load(state_file)
    for g in hw.gpus:
        g.present = False
    save(hw, state_file)
    assert main(["nvidia-smi", "-q", "--state", str(state_file)]) == 6
    assert capsys.readouterr().err.strip() == "No devices were found"
    assert main(["frobnicate"]) == 2


def test_failed_diag_prints_json_and_exits_nonzero(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hw = load(state_file)
    apply_fault(hw, "row_remap_failure,gpu=2")
    save(hw, state_file)
    assert main(["dcgmi", "--state", str(state_file), "diag", "-r", "1", "-j"]) == 1
    report = parse_dcgmi_diag(capsys.readouterr().out)
    assert any(r.status == "Fail" and r.gpu == 2 for r in report.results)


def test_fault_and_heal_commands(state_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", str(state_file), "ib_down=mlx5_4"]) == 0
    assert load(state_file).hca("mlx5_4").state == "Down"
    assert main(["fault", str(state_file), "nope"]) == 2
    assert "unknown fault 'nope'" in capsys.readouterr().err
    assert main(["fault", str(state_file), "--heal"]) == 0
    assert load(state_file).hca("mlx5_4").state == "Active"


def test_ib_sysfs_command_writes_a_tree(state_file: Path, tmp_path: Path) -> None:
    assert main(["ib-sysfs", "--state", str(state_file), "--root", str(tmp_path / "ib")]) == 0
    assert (tmp_path / "ib" / "mlx5_7" / "ports" / "1" / "state").read_text() == "4: ACTIVE\n"


@pytest.mark.skipif(
    shutil.which("python3", path="/usr/bin") is None, reason="needs Debian's /usr/bin/python3"
)
def test_installed_shims_run_on_a_bare_python(state_file: Path, tmp_path: Path) -> None:
    """The lab machines have Debian's python3 and nothing else: -I ignores site-packages and env."""
    scripts = install_shims(tmp_path / "bin", tmp_path / "lib", python="/usr/bin/python3 -I")
    assert sorted(p.name for p in scripts) == sorted(SHIM_NAMES)
    for argv in (
        ["nvidia-smi", "-q"],
        ["ibstat"],
        ["perfquery", "-x"],
        ["dcgmi", "health", "-c", "-j"],
        ["dmesg"],
    ):
        done = subprocess.run(
            [str(tmp_path / "bin" / argv[0]), *argv[1:], "--state", str(state_file)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (argv, done.stderr)
        assert done.stdout or argv[0] == "dmesg"
    out = subprocess.run(
        [str(tmp_path / "bin" / "ibstat"), "--state", str(state_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert len(parse_ibstat(out).cas) == 8


def test_query_gpu_and_list(state_file: Path, node: NodeHardware, capsys: pytest.CaptureFixture[str]) -> None:
    # The form the nvidia Ansible role uses to read the driver version.
    assert (
        main(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "--state", str(state_file)]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == [node.driver_version] * 8
    assert (
        main(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv", "--state", str(state_file)])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "index, memory.total [MiB]" and lines[1] == "0, 143771 MiB" and len(lines) == 9
    assert main(["nvidia-smi", "--query-gpu=bogus", "--format=csv", "--state", str(state_file)]) == 2
    assert 'Field "bogus" is not a valid field to query.' in capsys.readouterr().err
    assert main(["nvidia-smi", "-L", "--state", str(state_file)]) == 0
    assert capsys.readouterr().out.splitlines()[3] == f"GPU 3: NVIDIA H200 (UUID: {node.gpu(3).uuid})"


def test_saving_through_a_symlink_keeps_the_link(tmp_path: Path, node: NodeHardware) -> None:
    save(node, tmp_path / "gpu-007.json")
    (tmp_path / "state.json").symlink_to("gpu-007.json")
    assert main(["fault", str(tmp_path / "state.json"), "xid=79"]) == 0
    assert (tmp_path / "state.json").is_symlink()
    assert load(tmp_path / "gpu-007.json").xids[0].xid == 79


def test_dmesg_stamps_count_from_the_running_kernel_after_a_heal(
    state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SSH source turns a kernel stamp into wall time with the machine's own /proc/uptime. After
    ``heal`` the simulated boot is "now", but the kernel the shim runs under is not rebooted: a
    fresh XID must still read as fresh, not as hours old (the lab's health-over-SSH miss)."""
    from opsctl.evidence.convert import xids_from_dmesg
    from opsctl.hwsim.faults import heal
    from opsctl.parsers.dmesg_xid import parse_dmesg_xids

    state = load(state_file)
    heal(state)
    apply_fault(state, "xid=79,gpu=5")
    save(state, state_file)
    assert main(["dmesg", "--state", str(state_file)]) == 0
    text = capsys.readouterr().out
    assert main(["dmesg", "--state", str(state_file)]) == 0
    assert capsys.readouterr().out == text  # the same line, the same stamp: read twice, counted once
    now = time.time()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    [event] = xids_from_dmesg(parse_dmesg_xids(text), [], "", now, uptime)
    assert event.xid == 79
    assert event.time is not None and abs(event.time - state.xids[0].time) < 5.0, (event, text, uptime)


def test_dmesg_stamps_count_from_the_kernel_btime_a_lab_machine_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lab machine covers /proc/stat with its own boot's btime; the shim stamps from the running
    kernel's, saved before, since readers convert stamps with that kernel's /proc/uptime."""
    from opsctl.hwsim import tools

    saved = tmp_path / "kernel-btime"
    saved.write_text("1700000000\n")
    monkeypatch.setattr(tools, "KERNEL_BTIME_FILE", str(saved))
    assert tools._kernel_boot_time() == 1700000000.0
    saved.unlink()  # elsewhere: /proc/stat's btime
    stat = Path("/proc/stat").read_text().splitlines()
    proc_btime = next(float(x.split()[1]) for x in stat if x.startswith("btime "))
    assert tools._kernel_boot_time() == proc_btime
