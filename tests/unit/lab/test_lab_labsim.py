import configparser
import subprocess
from pathlib import Path

import pytest

from opsctl.errors import UsageError
from opsctl.hwsim.tools import KERNEL_BTIME_FILE
from opsctl.lab import faults, labsim
from opsctl.lab.config import LabConfig


def test_exporter_unit_serves_dcgm_on_port_9400_from_the_nodes_state_and_the_roles_counters() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(labsim.render_exporter_unit("gpu-001"))
    start = parser["Service"]["ExecStart"].split()
    assert start[:3] == ["/usr/bin/python3", "-m", labsim.EXPORTER_MODULE]
    assert start[start.index("--node") + 1] == "gpu-001=9400"
    assert start[start.index("--state-dir") + 1] == "/var/lib/hwsim"
    assert start[start.index("--listen") + 1] == "0.0.0.0"
    # only dcgm-exporter (the machine runs the real node_exporter), with the file the dcgm role writes
    assert start[start.index("--serve") + 1] == "dcgm"
    assert start[start.index("--collectors") + 1] == "/etc/dcgm-exporter/default-counters.csv"
    path = configparser.ConfigParser(strict=False, interpolation=None)
    path.optionxform = str  # type: ignore[assignment,method-assign]
    path.read_string(labsim.render_exporter_path_unit())
    assert path["Path"]["PathExists"] == "/etc/dcgm-exporter/default-counters.csv"
    assert path["Path"]["Unit"] == labsim.EXPORTER_UNIT
    assert path["Install"]["WantedBy"] == "multi-user.target"


def test_only_gpu_machines_get_the_state_bind_mount(tmp_path: object) -> None:
    cfg = LabConfig(gpu_nodes=1)
    assert labsim.bind_args(cfg, cfg.head) == []
    (arg,) = labsim.bind_args(cfg, cfg.machine("gpu-001"))
    assert arg.startswith("--bind=") and arg.endswith(":/var/lib/hwsim")


def test_faults_are_refused_on_the_head_and_unknown_nodes() -> None:
    cfg = LabConfig(gpu_nodes=1)
    with pytest.raises(UsageError, match="head"):
        faults.inject(cfg, "head-01", "xid=79")
    with pytest.raises(UsageError, match="gpu-007"):
        faults.heal(cfg, "gpu-007")


def _unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def test_each_boot_of_a_gpu_machine_is_a_boot_of_its_hardware_before_anything_reads_it(
    tmp_path: Path,
) -> None:
    """The boot unit runs before slurmd, node_exporter and the emulated exporter; its script boots the
    simulated hardware, gives /proc/stat this boot's btime and leaves -b for the boot's first slurmd,
    whose drop-in consumes it."""
    cfg = LabConfig(gpu_nodes=1, state_dir=tmp_path / "state")
    upper = tmp_path / "upper"
    labsim.install(cfg, cfg.machine("gpu-001"), upper)
    units = upper / "etc/systemd/system"
    boot = _unit((units / labsim.BOOT_UNIT).read_text())
    assert set(boot["Unit"]["Before"].split()) == {
        "slurmd.service", "prometheus-node-exporter.service", labsim.EXPORTER_UNIT
    }
    assert boot["Service"]["Type"] == "oneshot" and boot["Service"]["RemainAfterExit"] == "yes"
    assert boot["Service"]["ExecStart"] == f"/bin/sh {labsim.BOOT_SCRIPT}"
    wants = units / "multi-user.target.wants" / labsim.BOOT_UNIT
    assert wants.is_symlink() and str(wants.readlink()) == f"/etc/systemd/system/{labsim.BOOT_UNIT}"
    script = (upper / labsim.BOOT_SCRIPT.lstrip("/")).read_text().splitlines()
    assert "-m opsctl.hwsim.boot --state /var/lib/hwsim/state.json" in script[3]
    cover = f"mountpoint -q /proc/stat || mount --bind {labsim.BOOT_RUN_DIR}/stat /proc/stat"
    # the kernel's own btime is saved before it is covered, where the dmesg shim looks for it
    assert labsim.KERNEL_BTIME == KERNEL_BTIME_FILE
    save = f"[ -e {KERNEL_BTIME_FILE} ] || awk '/^btime /{{print $2}}' /proc/stat > {KERNEL_BTIME_FILE}"
    assert script.index(save) < script.index(cover)
    # -b only on a boot after one in which slurmd ran (a first start is no reboot)
    ran, env = labsim.SLURMD_HAS_RUN, labsim.SLURMD_BOOT_ENV
    assert script[-1] == f"[ ! -e {ran} ] || echo SLURMD_OPTIONS=-b > {env}"
    dropin = _unit((units / labsim.SLURMD_DROPIN).read_text())
    assert dropin["Unit"]["After"] == labsim.BOOT_UNIT
    assert dropin["Service"]["EnvironmentFile"] == f"-{labsim.SLURMD_BOOT_ENV}"
    post = dropin["Service"]["ExecStartPost"]
    assert post.startswith(f"/bin/sh -c 'rm -f {env};") and f"touch {ran}'" in post
    # a second install (lab up again) leaves the same files and links
    labsim.install(cfg, cfg.machine("gpu-001"), upper)
    assert wants.is_symlink()


def test_the_boot_script_gives_proc_stat_this_boots_btime(tmp_path: Path) -> None:
    """The script's btime line, run against a copy of a real /proc/stat."""
    (line,) = [x for x in labsim.render_boot_script().splitlines() if x.startswith("sed ")]
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 0 5 100 0 0 0 0 0 0\nintr 5\nctxt 77\nbtime 1700000000\nprocesses 9\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cmd = line.replace("/proc/stat", str(stat)).replace(labsim.BOOT_RUN_DIR, str(run_dir))
    subprocess.run(["sh", "-c", f"date() {{ echo 1800000000; }}; {cmd}"], check=True)
    out = (run_dir / "stat").read_text().splitlines()
    assert out == ["cpu  10 0 5 100 0 0 0 0 0 0", "intr 5", "ctxt 77", "btime 1800000000", "processes 9"]
