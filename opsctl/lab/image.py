"""The cached Debian base image that every lab machine boots as its read-only lower layer.

Built once with debootstrap, then topped up with the .deb files the roles install so that nodes,
which have no route out, install packages offline. The cache lives outside the repository
($OPSCTL_LAB_CACHE, default /var/cache/opsctl-lab) and is reused across `lab up` runs; adding a
package to a role downloads only what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
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


@dataclass(frozen=True)
class BaseImage:
    rootfs: Path
    packages: tuple[str, ...]


def image_dir(cfg: LabConfig) -> Path:
    return cfg.cache_dir / f"{cfg.suite}-v{IMAGE_VERSION}"


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


def _download(rootfs: Path, packages: list[str]) -> None:
    """apt lists and .deb files for `packages` (and their dependencies) into the base image."""
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
        run(
            [
                "chroot",
                rootfs,
                "apt-get",
                "install",
                "-y",
                "-q",
                "--download-only",
                "--no-install-recommends",
                *packages,
            ],
            env=env,
            timeout=1800,
        )
    finally:
        resolv.write_text("")


def ensure_image(cfg: LabConfig, packages: list[str]) -> BaseImage:
    """Build (first time) or reuse the base image, and make sure `packages` are downloaded in it."""
    root = image_dir(cfg)
    root.mkdir(parents=True, exist_ok=True)
    rootfs = root / "rootfs"
    if not (rootfs / "usr/bin/python3").exists():
        _bootstrap(cfg, rootfs, root / "debootstrap.log")
    stamp = root / "packages.json"
    listed = _read_json(stamp).get("packages", [])
    have = {str(p) for p in listed} if isinstance(listed, list) else set()
    want = sorted(set(packages))
    missing = [p for p in want if p not in have]
    if missing:
        _download(rootfs, want)
        tmp = stamp.with_suffix(".tmp")
        tmp.write_text(json.dumps({"packages": sorted(have | set(want))}, indent=1))
        os.replace(tmp, stamp)
    return BaseImage(rootfs=rootfs, packages=tuple(want))
