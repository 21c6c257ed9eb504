"""The cached Debian base image that every lab machine boots as its read-only lower layer.

Built once with debootstrap, then topped up with the .deb files the roles install so that nodes,
which have no route out, install packages offline. The cache lives outside the repository
($OPSCTL_LAB_CACHE, default /var/cache/opsctl-lab) and is reused across `lab up` runs; adding a
package to a role downloads only what is missing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from opsctl.lab.config import LabConfig
from opsctl.lab.shell import LabCommandError, run

# What every machine needs to boot under nspawn, take SSH logins and run Ansible modules.
BASE_INCLUDES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "iproute2",
    "procps",
)
# Timers that would take the dpkg lock (and try the network) while Ansible converges a node.
MASKED_UNITS: tuple[str, ...] = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_reap.service")
IMAGE_VERSION = 1
DOWNLOAD_MODE = "with-recommends"  # a change here re-downloads everything into the cache


@dataclass(frozen=True)
class BaseImage:
    rootfs: Path
    packages: tuple[str, ...]  # downloaded, installable offline
    unavailable: tuple[str, ...]  # requested by a role but not in Debian (NVIDIA's repository)


def image_dir(cfg: LabConfig) -> Path:
    return cfg.cache_dir / f"{cfg.suite}-v{IMAGE_VERSION}"


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _names(value: object) -> set[str]:
    return {str(v) for v in value} if isinstance(value, list) else set()


def _bootstrap(cfg: LabConfig, target: Path, log: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    proc = run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_INCLUDES)}",
            cfg.suite,
            tmp,
            cfg.mirror,
        ],
        check=False,
        timeout=1800,
    )
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise LabCommandError(f"debootstrap failed (exit {proc.returncode}), see {log}: {tail}")
    for unit in MASKED_UNITS:
        link = tmp / "etc/systemd/system" / unit
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    # Each machine gets its own id in its upper dir; an empty file here keeps the base neutral.
    (tmp / "etc/machine-id").write_text("")
    tmp.rename(target)


def _download(rootfs: Path, packages: list[str]) -> list[str]:
    """apt lists and .deb files for `packages` (and dependencies) into the base image.

    Returns the names Debian does not carry (NVIDIA's driver, DCGM...): production installs them
    from NVIDIA's repository and the lab skips those tasks (gpu_hardware_present: false).
    """
    resolv = rootfs / "etc/resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
    shutil.copyfile("/etc/resolv.conf", resolv)
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C",
    }
    try:
        run(["chroot", rootfs, "apt-get", "update", "-q"], env=env, timeout=900)
        known = set(run(["chroot", rootfs, "apt-cache", "pkgnames"], env=env).stdout.split())
        available = [p for p in packages if p in known]
        if available:
            argv: list[str | Path] = ["chroot", rootfs, "apt-get", "install", "-y", "-q", "--download-only"]
            # With recommends, as apt (and Ansible's apt module) installs them by default in the nodes.
            run([*argv, *available], env=env, timeout=1800)
    finally:
        resolv.write_text("")
    return [p for p in packages if p not in known]


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold the image's lock: a second builder (`lab prepare` started by the bootstrap, a `lab up`
    beside it) waits for the first and then finds the image ready, instead of deleting its half-built
    tree. The kernel drops the lock when its holder dies, so a killed build never blocks the next."""
    with open(root / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_image(cfg: LabConfig, packages: list[str]) -> BaseImage:
    """Build (first time) or reuse the base image, and make sure `packages` are downloaded in it."""
    root = image_dir(cfg)
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        return _ensure_image_locked(root, cfg, packages)


def _ensure_image_locked(root: Path, cfg: LabConfig, packages: list[str]) -> BaseImage:
    rootfs = root / "rootfs"
    if not (rootfs / "usr/bin/python3").exists():
        _bootstrap(cfg, rootfs, root / "debootstrap.log")
    stamp = root / "packages.json"
    data = _read_json(stamp)
    requested, unavailable = _names(data.get("requested")), _names(data.get("unavailable"))
    if data.get("download") != DOWNLOAD_MODE:
        requested = set()
    want = set(packages)
    if not want <= requested:
        # Ask for everything again: apt fetches only what is not in the archive yet.
        unavailable = set(_download(rootfs, sorted(want | requested)))
        requested |= want
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "download": DOWNLOAD_MODE,
                    "requested": sorted(requested),
                    "unavailable": sorted(unavailable),
                },
                indent=1,
            )
        )
        os.replace(tmp, stamp)
    return BaseImage(
        rootfs=rootfs,
        packages=tuple(sorted(want - unavailable)),
        unavailable=tuple(sorted(want & unavailable)),
    )
