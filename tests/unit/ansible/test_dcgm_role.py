"""The dcgm role's files rendered by the real Ansible for the production versions: golden copies,
the units' arguments, and the Slurm job mapping prolog/epilog run by a real shell."""

from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path

import pytest
from provisioning_helpers import GOLDEN, REPO, render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_dcgm.yml"
VERSIONS = REPO / "inventory/production/group_vars/all/versions.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
GOLDEN_FILES = {
    "counters.csv": "dcgm-counters.csv",
    "dcgm-exporter.service": "dcgm-exporter.service",
    "dcgm-health-watches.service": "dcgm-health-watches.service",
    "prolog-dcgm-job-map.sh": "prolog-dcgm-job-map.sh",
    "epilog-dcgm-job-map.sh": "epilog-dcgm-job-map.sh",
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dcgm")
    out = tmp / "out"
    out.mkdir()
    render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}", "-e", f"@{VERSIONS}", inventory="localhost,")
    return out


@pytest.mark.parametrize("name", sorted(GOLDEN_FILES))
def test_production_golden(rendered: Path, name: str) -> None:
    got = (rendered / name).read_text()
    golden = GOLDEN / "production" / GOLDEN_FILES[name]
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} differs from {golden}"


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_the_exporter_gets_the_counters_the_xid_window_and_the_job_mapping(rendered: Path) -> None:
    argv = _unit(rendered / "dcgm-exporter.service")["Service"]["ExecStart"].split()

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--collectors") == "/etc/dcgm-exporter/default-counters.csv"
    assert flag("--xid-count-window-size") == "300000"  # dcgm-exporter's default, stated
    assert flag("--hpc-job-mapping-dir") == "/run/dcgm-job-map"
    assert "d /run/dcgm-job-map 0755 root root -" in (rendered / "dcgm-job-map.tmpfiles").read_text()


def test_health_watches_are_set_each_time_the_host_engine_starts(rendered: Path) -> None:
    unit = _unit(rendered / "dcgm-health-watches.service")
    assert unit["Service"]["ExecStart"] == "/usr/bin/dcgmi health --set pmitn"
    assert unit["Service"]["Type"] == "oneshot" and unit["Service"]["RemainAfterExit"] == "yes"
    # bound to the host engine (watches live in it) and pulled in whenever it starts
    assert unit["Unit"]["BindsTo"] == "nvidia-dcgm.service" and unit["Unit"]["After"] == "nvidia-dcgm.service"
    assert unit["Install"]["WantedBy"] == "nvidia-dcgm.service"


def _hook(rendered: Path, name: str, mapping: Path) -> Path:
    """The rendered hook with the mapping directory moved under the test's temporary directory."""
    script = mapping.parent / name
    text = (rendered / name).read_text()
    assert "dir=/run/dcgm-job-map\n" in text
    script.write_text(text.replace("dir=/run/dcgm-job-map\n", f"dir={mapping}\n"))
    return script


def _run(script: Path, **env: str) -> None:
    subprocess.run(["/bin/sh", str(script)], env={"PATH": "/usr/bin:/bin", **env}, check=True, timeout=30)


def test_prolog_and_epilog_keep_one_file_per_gpu_with_its_jobs(rendered: Path, tmp_path: Path) -> None:
    mapping = tmp_path / "map"
    prolog = _hook(rendered, "prolog-dcgm-job-map.sh", mapping)
    epilog = _hook(rendered, "epilog-dcgm-job-map.sh", mapping)
    _run(prolog, SLURM_JOB_ID="101", SLURM_JOB_GPUS="0,3")
    _run(prolog, SLURM_JOB_ID="102", SLURM_JOB_GPUS="3")  # a shared GPU lists both jobs
    _run(prolog, SLURM_JOB_ID="103")  # no GPUs: nothing
    files = {p.name: p.read_text().split() for p in mapping.iterdir()}
    assert files == {"0": ["101"], "3": ["101", "102"]}
    _run(prolog, SLURM_JOB_ID="102", SLURM_JOB_GPUS="3")  # a requeued prolog does not list it twice
    assert (mapping / "3").read_text().split() == ["101", "102"]
    _run(epilog, SLURM_JOB_ID="101", SLURM_JOB_GPUS="0,3")
    assert {p.name: p.read_text().split() for p in mapping.iterdir()} == {"3": ["102"]}
    _run(epilog, SLURM_JOB_ID="102", SLURM_JOB_GPUS="3")
    _run(epilog, SLURM_JOB_ID="102", SLURM_JOB_GPUS="3")  # again, or for a GPU without a file: fine
    assert list(mapping.iterdir()) == []


def test_the_health_watch_unit_passes_systemd_analyze_verify(rendered: Path, tmp_path: Path) -> None:
    # verify insists ExecStart exists and the bound unit is known here: point them at what this
    # machine has, keeping every key and value as rendered
    text = (rendered / "dcgm-health-watches.service").read_text()
    unit = tmp_path / "dcgm-health-watches.service"
    unit.write_text(
        text.replace("/usr/bin/dcgmi", "/bin/true").replace("nvidia-dcgm.service", "sysinit.target")
    )
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert str(unit) not in proc.stderr, proc.stderr  # no unknown key, no bad value
