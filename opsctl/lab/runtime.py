"""The training runtime's wheelhouse, staged by the host into the lab's stand-in share.

Production stages a wheelhouse on the NFS share (or serves an internal index) and the
`training_runtime` role builds a virtualenv from it with `pip --no-index`. The lab machines have
no route out, so the host does the downloading: the project wheel is built here, its dependencies
(at the versions of the CPU lock, locks/cpu.txt: torch is the CPU build this host's pip has on
disk) are downloaded once for the machines' Python (Debian 12: CPython 3.11, manylinux x86_64) into
the lab cache, and both are linked into `<state>/shared/nfs/opsctl/wheelhouse`, which every
machine sees as /shared/opsctl/wheelhouse. The training_runtime role installs with the same lock.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from opsctl.lab.config import LabConfig
from opsctl.lab.shell import LabCommandError, run

PROJECT = "opsctl"
# Exactly this release: pip then takes the CPU wheel; a looser pin resolves to a CUDA build.
TORCH_REQUIREMENT = "torch==2.13.0"
# The lab machines' interpreter (Debian bookworm's python3) and the wheels it can install.
LAB_PYTHON_VERSION = "3.11"
LAB_PLATFORMS: tuple[str, ...] = (
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
WHEELHOUSE_IN_SHARE = Path("opsctl/wheelhouse")  # under the NFS stand-in, /shared in the machines
LOCK = Path("locks/cpu.txt")  # in the repository: the lab machines run the CPU platform


@dataclass(frozen=True)
class StagedWheelhouse:
    path: Path  # on the host
    project_wheel: str  # file name
    wheels: int
    size_bytes: int


def wheelhouse_dir(cfg: LabConfig) -> Path:
    return cfg.shared_dir / "nfs" / WHEELHOUSE_IN_SHARE


def cache_dir(cfg: LabConfig) -> Path:
    return cfg.cache_dir / f"wheelhouse-cp{LAB_PYTHON_VERSION.replace('.', '')}"


def opsctl_wheelhouse_dir(cfg: LabConfig) -> Path:
    """The lean install's wheelhouse on the host (opsctl and its dependencies, no training extra):
    what docs/getting-started.md step 1 builds, for the opsctl_remediation role to copy to the head."""
    return cfg.state_dir / "opsctl-wheelhouse"


def lock_copy(cfg: LabConfig) -> Path:
    """The lock the wheelhouse was staged with, kept with the lab's state on the host: the role
    installs at exactly these versions, whatever the repository holds by the time it runs."""
    return cfg.state_dir / "runtime-lock.txt"


def staged(cfg: LabConfig) -> bool:
    """True once a project wheel lies in the lab's wheelhouse (the inventory then enables the role)."""
    return any(wheelhouse_dir(cfg).glob(f"{PROJECT}-*.whl"))


def download_argv(
    dest: Path, requirements: list[str], lock: Path, find_links: Path | None = None
) -> list[str]:
    """`pip download` of binary wheels for the lab machines' Python, not this host's, at the
    versions the lock names; from FIND_LINKS alone (no index) when given."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest)]
    if find_links is not None:
        argv += ["--no-index", "--find-links", str(find_links)]
    argv += ["--constraint", str(lock)]
    argv += ["--python-version", LAB_PYTHON_VERSION, "--implementation", "cp", "--only-binary=:all:"]
    for platform in LAB_PLATFORMS:
        argv += ["--platform", platform]
    return argv + requirements


def build_project_wheel(repo_root: Path, out: Path) -> Path:
    """The project's wheel (opsctl and the training package) built from `repo_root` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    run([*argv, "--wheel-dir", str(out), str(repo_root)], timeout=600)
    wheels = sorted(out.glob(f"{PROJECT}-*.whl"))
    if len(wheels) != 1:
        raise LabCommandError(f"building the {PROJECT} wheel left {len(wheels)} wheels in {out}")
    return wheels[0]


def _link_or_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)  # the cache and the state dir usually share a file system
    except OSError:
        shutil.copyfile(src, tmp)
    tmp.chmod(0o644)
    os.replace(tmp, dst)


def _drop_project_wheels(directory: Path) -> None:
    for old in directory.glob(f"{PROJECT}-*.whl"):
        old.unlink()


def stage(cfg: LabConfig, repo_root: Path) -> StagedWheelhouse:
    """Build the project wheel, download what it needs (cached), and lay both out in the share."""
    dest = wheelhouse_dir(cfg)
    cache = cache_dir(cfg)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="opsctl-wheel-") as tmp:
        wheel = build_project_wheel(repo_root, Path(tmp))
        # pip skips what the cache already holds, and it saves the project wheel there too. An
        # older project wheel left in the cache would be taken for this one (same name), and its
        # metadata would resolve the dependencies: a dependency added since would never be
        # downloaded. So the cache never keeps a project wheel; the share gets the fresh build.
        _drop_project_wheels(cache)
        # the wheel with its training extra: the job's stack (torch and the rest) comes with it
        run(download_argv(cache, [f"{wheel}[training]", TORCH_REQUIREMENT], repo_root / LOCK), timeout=1800)
        _drop_project_wheels(cache)
        dest.mkdir(parents=True, exist_ok=True)
        _drop_project_wheels(dest)
        for dep in sorted(cache.glob("*.whl")):
            _link_or_copy(dep, dest / dep.name)
        _link_or_copy(wheel, dest / wheel.name)
    _stage_lean(cfg, dest / wheel.name, repo_root / LOCK)
    shutil.copyfile(repo_root / LOCK, lock_copy(cfg))
    for d in (dest, dest.parent):
        d.chmod(0o755)
    wheels = sorted(dest.glob("*.whl"))
    return StagedWheelhouse(
        path=dest,
        project_wheel=wheel.name,
        wheels=len(wheels),
        size_bytes=sum(w.stat().st_size for w in wheels),
    )


def _stage_lean(cfg: LabConfig, wheel: Path, lock: Path) -> None:
    """The project wheel and what it needs without the training extra, picked from the staged
    wheelhouse (pip resolves against it, no index): the lean install of the head and login nodes."""
    lean = opsctl_wheelhouse_dir(cfg)
    shutil.rmtree(lean, ignore_errors=True)
    lean.mkdir(parents=True)
    run(download_argv(lean, [str(wheel)], lock, find_links=wheel.parent), timeout=600)
