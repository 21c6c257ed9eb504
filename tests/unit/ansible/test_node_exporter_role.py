"""The node_exporter role's boot id writer and its unit, rendered by the real Ansible with the role's
defaults: golden copies, systemd-analyze verify, and the writer run by a real shell, its output
checked by promtool and compared with what the simulator's node_exporter serves."""

from __future__ import annotations

import configparser
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from provisioning_helpers import GOLDEN, REPO, render_playbook

from opsctl.evidence.prometheus import BOOT_ID_METRIC, PrometheusSource
from opsctl.hwsim.metrics import boot_id_families, render_text
from opsctl.hwsim.state import make_node

PLAYBOOK = "tests/unit/ansible/playbooks/render_node_exporter.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
GOLDEN_FILES = ("opsctl-boot-id.service", "opsctl-boot-id.sh")
BOOT_ID = "8a3f0c4e-1f6b-4a8e-9b1d-2c7e5f0a9d31"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("node_exporter")
    out = tmp / "out"
    out.mkdir()
    render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}", inventory="localhost,")
    script = out / "opsctl-boot-id.sh"
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return out


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_production_golden(rendered: Path, name: str) -> None:
    got = (rendered / name).read_text()
    golden = GOLDEN / "production" / name
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} differs from {golden}"


def _write(script: Path, src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), str(src), str(out)], capture_output=True, text=True, timeout=30)


def test_the_writer_serves_the_boot_id_as_the_simulator_does(rendered: Path, tmp_path: Path) -> None:
    src, out = tmp_path / "boot_id", tmp_path / "textfile" / "opsctl_boot_id.prom"
    out.parent.mkdir()
    src.write_text(BOOT_ID + "\n")
    proc = _write(rendered / "opsctl-boot-id.sh", src, out)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left behind
    node = make_node("gpu-001")
    node.boot_id = BOOT_ID
    assert out.read_text() == render_text(boot_id_families(node))
    promtool = shutil.which("promtool")
    assert promtool, "promtool not installed (scripts/bootstrap.sh installs it)"
    check = subprocess.run(
        [promtool, "check", "metrics"], input=out.read_text(), capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_failed_write_leaves_no_earlier_boot_s_id(rendered: Path, tmp_path: Path) -> None:
    src, out = tmp_path / "boot_id", tmp_path / "opsctl_boot_id.prom"
    out.write_text(f'opsctl_boot_id_info{{boot_id="{BOOT_ID}"}} 1\n')  # the previous boot's
    src.write_text("not-a-boot-id; rm -rf /\n")
    proc = _write(rendered / "opsctl-boot-id.sh", src, out)
    assert proc.returncode == 1 and "not a boot id" in proc.stderr
    assert not out.exists()


def test_the_writer_reads_the_kernel_s_boot_id_by_default(rendered: Path, tmp_path: Path) -> None:
    kernel = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    out = tmp_path / "opsctl_boot_id.prom"
    proc = subprocess.run(
        [str(rendered / "opsctl-boot-id.sh"), "/proc/sys/kernel/random/boot_id", str(out)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert f'{BOOT_ID_METRIC}{{boot_id="{kernel}"}} 1\n' in out.read_text()


def test_the_unit_writes_into_the_collector_s_directory_before_node_exporter(rendered: Path) -> None:
    defaults = yaml.safe_load((REPO / "roles/node_exporter/defaults/main.yml").read_text())
    textfile = defaults["node_exporter_textfile_dir"]
    assert "--collector.textfile.directory={{ node_exporter_textfile_dir }}" in defaults["node_exporter_args"]
    script = (rendered / "opsctl-boot-id.sh").read_text()
    assert f"out=${{2:-{textfile}/opsctl_boot_id.prom}}" in script  # a *.prom file: the collector reads it
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((rendered / "opsctl-boot-id.service").read_text())
    assert unit["Unit"]["Before"] == "prometheus-node-exporter.service"
    assert (
        unit["Service"]["Type"] == "oneshot"
        and unit["Service"]["ExecStart"] == "/usr/local/sbin/opsctl-boot-id"
    )
    assert "prometheus-node-exporter.service" in unit["Install"]["WantedBy"].split()
    tasks = yaml.safe_load((REPO / "roles/node_exporter/tasks/main.yml").read_text())
    installed = {
        t["ansible.builtin.template"]["src"]: t["ansible.builtin.template"]["dest"]
        for t in tasks
        if "ansible.builtin.template" in t
    }
    assert installed == {
        "opsctl-boot-id.sh.j2": "/usr/local/sbin/opsctl-boot-id",
        "opsctl-boot-id.service.j2": "/etc/systemd/system/opsctl-boot-id.service",
    }
    flat = [inner for t in tasks for inner in [t, *t.get("block", []), *t.get("rescue", [])]]
    (enable,) = [
        t["ansible.builtin.systemd_service"]
        for t in flat
        if t.get("ansible.builtin.systemd_service", {}).get("name") == "opsctl-boot-id"
    ]
    assert enable["enabled"] is True and enable["state"] == "started"
    # a start that fails says why: the rescue reads the unit's journal into the failure
    (block,) = [t for t in tasks if any(i in flat for i in t.get("block", []))]
    assert [next(iter(k for k in r if k.startswith("ansible."))) for r in block["rescue"]] == [
        "ansible.builtin.command", "ansible.builtin.fail"]
    assert "journalctl --unit opsctl-boot-id" in block["rescue"][0]["ansible.builtin.command"]
    # the Prometheus source reads the metric the writer writes
    assert BOOT_ID_METRIC in PrometheusSource("http://x").queries()["boot_ids"]
    assert f"{BOOT_ID_METRIC}{{boot_id=" in script


def test_the_unit_passes_systemd_analyze_verify(rendered: Path, tmp_path: Path) -> None:
    # verify insists ExecStart exists here: point it at the rendered writer, every other key as rendered
    text = (rendered / "opsctl-boot-id.service").read_text()
    unit = tmp_path / "opsctl-boot-id.service"
    unit.write_text(text.replace("/usr/local/sbin/opsctl-boot-id", str(rendered / "opsctl-boot-id.sh")))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert str(unit) not in proc.stderr, proc.stderr  # no unknown key, no bad value
