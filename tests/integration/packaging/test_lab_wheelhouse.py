"""The training runtime's wheelhouse as `opsctl lab up --runtime` stages it into the NFS stand-in:
built and downloaded for real with this host's pip (its local mirror, no other network), then
resolved offline by pip exactly as the role's `pip install --no-index` resolves it on a machine."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from opsctl.lab import runtime
from opsctl.lab.config import LabConfig
from opsctl.lab.inventory import inventory_data

pytestmark = pytest.mark.integration  # pip builds and downloads wheels: not for the unit tier

REPO = Path(__file__).resolve().parents[3]
# What Debian 12's CPython 3.11 on x86_64 (the lab machines' python3) installs, as pip computes it
# (cp311 and abi3 builds, and pure wheels down to py30, py311-none-any included).
LAB_TAGS = set(cpython_tags((3, 11), platforms=runtime.LAB_PLATFORMS)) | set(
    compatible_tags((3, 11), "cp311", runtime.LAB_PLATFORMS)
)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> tuple[LabConfig, runtime.StagedWheelhouse]:
    root = tmp_path_factory.mktemp("lab")
    cfg = LabConfig(gpu_nodes=2, state_dir=root / "state", cache_dir=root / "cache")
    assert not runtime.staged(cfg)
    return cfg, runtime.stage(cfg, REPO)


def test_the_wheelhouse_lies_in_the_nfs_stand_in_and_holds_this_project(staged) -> None:
    cfg, result = staged
    assert result.path == cfg.state_dir / "shared" / "nfs" / "opsctl" / "wheelhouse"
    wheel = result.path / result.project_wheel
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    # this repository's opsctl (PyPI carries an unrelated package of the same name)
    assert "training/model.py" in names and "opsctl/lab/runtime.py" in names
    assert 'Requires-Dist: torch==2.13.0; extra == "training"' in meta.splitlines()
    assert result.wheels == len(list(result.path.glob("*.whl"))) and result.size_bytes > 100 * 2**20


def test_every_wheel_installs_on_the_lab_machines_python(staged) -> None:
    _cfg, result = staged
    wheels = sorted(result.path.glob("*.whl"))
    torch = [w.name for w in wheels if w.name.startswith("torch-")]
    assert torch == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]  # the CPU build
    for w in wheels:
        _name, _version, _build, tags = parse_wheel_filename(w.name)
        assert tags & LAB_TAGS, f"{w.name} does not install on CPython 3.11 x86_64"


def test_pip_resolves_the_runtime_from_the_wheelhouse_alone(staged, tmp_path: Path) -> None:
    _cfg, result = staged
    # no pip configuration at all: no mirror, no extra find-links, only the staged directory
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, HOME=str(tmp_path))
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index"]
    proc = subprocess.run(
        [*argv, "--find-links", str(result.path), "opsctl==0.1.0", "torch==2.13.0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Would install" in proc.stdout
    assert "opsctl-0.1.0" in proc.stdout and "torch-2.13.0+cpu" in proc.stdout
    # every dependency at the version of the CPU lock, as the role installs it (--constraint)
    pins = [ln.split("==") for ln in (REPO / runtime.LOCK).read_text().splitlines() if ln and ln[0] != "#"]
    lock = {canonicalize_name(name): version for name, version in pins}
    for dist in proc.stdout.split("Would install", 1)[1].split():
        name, version = dist.rsplit("-", 1)
        if name != "opsctl":
            assert lock[canonicalize_name(name)] == version, f"{dist}: the lock pins another version"


def test_the_inventory_enables_the_role_once_the_wheelhouse_is_staged(staged, tmp_path: Path) -> None:
    cfg, _result = staged
    group = inventory_data(cfg)["all"]["children"]["training_runtime"]
    assert group["children"] == {"gpu_nodes": None}
    # the role installs at the lock the wheelhouse was staged with, an absolute path in the state:
    # the inventory is copied there, so a path relative to it would leave the repository
    lock = Path(group["vars"]["training_runtime_lock"])
    assert lock == runtime.lock_copy(cfg) and lock.is_absolute()
    assert lock.read_text() == (REPO / runtime.LOCK).read_text()
    bare = LabConfig(gpu_nodes=2, state_dir=tmp_path)
    assert inventory_data(bare)["all"]["children"]["training_runtime"] == {"hosts": {}}


def test_staging_again_replaces_the_project_wheel_and_links_the_cache(staged) -> None:
    cfg, first = staged
    again = runtime.stage(cfg, REPO)
    assert (again.project_wheel, again.wheels) == (first.project_wheel, first.wheels)
    assert len(list(again.path.glob("opsctl-*.whl"))) == 1
    torch = next(again.path.glob("torch-*.whl"))
    assert torch.stat().st_ino == (runtime.cache_dir(cfg) / torch.name).stat().st_ino  # no second copy


def test_download_targets_the_machines_python_not_this_host(tmp_path: Path) -> None:
    argv = runtime.download_argv(tmp_path, ["torch==2.13.0"], REPO / runtime.LOCK)
    assert argv[argv.index("--python-version") + 1] == "3.11" and "--only-binary=:all:" in argv
    assert argv[argv.index("--constraint") + 1] == str(REPO / "locks" / "cpu.txt")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"] == list(runtime.LAB_PLATFORMS)
    assert argv[-1] == "torch==2.13.0"


def test_the_lean_wheelhouse_holds_opsctl_and_its_dependencies_without_the_training_stack(staged) -> None:
    """What the opsctl_remediation role installs on the lab's head: getting-started step 1's lean
    install, resolvable from that directory alone."""
    cfg, result = staged
    lean = runtime.opsctl_wheelhouse_dir(cfg)
    names = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in lean.glob("*.whl")}
    assert (lean / result.project_wheel).is_file()
    assert {"ansible-core", "click", "prometheus-client", "clustershell"} <= names
    assert not names & {"torch", "transformers", "tokenizers", "safetensors"}
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
         "--find-links", str(lean), "opsctl==0.1.0"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
