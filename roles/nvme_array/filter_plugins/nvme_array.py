"""Plan of a local NVMe array (md RAID + XFS + mount unit) from the hw_facts ``nvme`` list.

The plan is pure data: which drives become members, the exact ``mdadm --create`` and ``mkfs.xfs``
argv, the mount unit's name and options. The role's tasks run these argv as given, and the golden
tests compare the plan, so what is tested is what runs. Nothing here touches a disk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

# Least members md accepts per level (RAID0 of one drive is the drive itself, no md).
MIN_MEMBERS = {0: 1, 1: 2, 5: 3, 6: 4, 10: 2}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")


def systemd_mount_unit(path: str) -> str:
    """``/srv/nfs`` -> ``srv-nfs.mount`` (systemd-escape --path --suffix=mount)."""
    parts = [p for p in path.strip("/").split("/") if p]
    if not path.startswith("/") or not parts:
        raise AnsibleFilterError(f"nvme_array: mount point {path!r} must be an absolute path below /")
    out = []
    for part in parts:
        chars = []
        for i, c in enumerate(part):
            if (c.isalnum() and c.isascii()) or c in ":_" or (c == "." and i > 0):
                chars.append(c)
            else:
                chars.append("".join(f"\\x{b:02x}" for b in c.encode()))
        out.append("".join(chars))
    return "-".join(out) + ".mount"


def _members(hw: Mapping[str, Any], devices: Sequence[str], mount: str) -> list[str]:
    drives = {d["path"]: d for d in hw.get("nvme") or [] if isinstance(d, Mapping) and d.get("path")}
    if devices:
        unknown = [d for d in devices if d not in drives]
        if unknown:
            raise AnsibleFilterError(
                f"nvme_array: {', '.join(unknown)} not among the NVMe drives hw_facts found "
                f"({', '.join(sorted(drives)) or 'none'})"
            )
        chosen = [drives[d] for d in devices]
    else:
        # Every data drive that is free or already ours: not a system drive (/, /boot, swap)
        # and mounted nowhere but at this array's mount point.
        chosen = [d for d in drives.values() if not d.get("system") and set(d.get("mounts") or []) <= {mount}]
    busy = [
        f"{d['path']} ({', '.join(d.get('mounts') or [])})"
        for d in chosen
        if set(d.get("mounts") or []) - {mount}
    ]
    system = [d["path"] for d in chosen if d.get("system")]
    if system or busy:
        raise AnsibleFilterError(
            "nvme_array: refusing drives in use elsewhere: " + ", ".join(system + busy)
        )
    # md sizes every member to the smallest: mixed drives would waste the larger ones silently.
    sizes = sorted({int(d.get("size_bytes") or 0) for d in chosen})
    if len(sizes) > 1 and sizes[0] * 1.01 < sizes[-1]:
        listing = ", ".join(f"{d['path']} {int(d.get('size_bytes') or 0) / 1e9:.0f} GB" for d in chosen)
        raise AnsibleFilterError(
            f"nvme_array: the drives differ in size ({listing}); list the ones to use in nvme_array_devices"
        )
    return sorted(d["path"] for d in chosen)


def nvme_array_plan(
    hw: Mapping[str, Any],
    name: str,
    level: int,
    mount: str,
    devices: Sequence[str] = (),
    min_devices: int = 1,
    chunk_kib: int = 512,
    mount_options: Sequence[str] = ("noatime",),
    mkfs_options: Sequence[str] = (),
) -> dict[str, Any]:
    if not _NAME_RE.match(name or ""):
        raise AnsibleFilterError(f"nvme_array: name {name!r} must be lower-case letters, digits, '-' or '_'")
    level = int(level)
    if level not in MIN_MEMBERS:
        raise AnsibleFilterError(f"nvme_array: RAID level {level} not supported (0, 1, 5, 6 or 10)")
    members = _members(hw if isinstance(hw, Mapping) else {}, list(devices or []), mount)
    need = max(int(min_devices), MIN_MEMBERS[level])
    if len(members) < need:
        raise AnsibleFilterError(
            f"nvme_array: {name} needs at least {need} free NVMe data drives for RAID{level}, "
            f"found {len(members)} ({', '.join(members) or 'none'})"
        )
    use_md = len(members) > 1
    device = f"/dev/md/{name}" if use_md else members[0]
    create: list[str] = []
    if use_md:
        create = [
            "mdadm",
            "--create",
            device,
            "--run",
            f"--name={name}",
            "--homehost=any",  # the array keeps its /dev/md/<name> whatever the host is called
            "--metadata=1.2",
            f"--level={level}",
            f"--raid-devices={len(members)}",
        ]
        if level in (0, 5, 6, 10):
            create.append(f"--chunk={int(chunk_kib)}K")
        if level in (1, 5, 6, 10):
            # Mirrors and parity resync in the background; the bitmap keeps a crash's resync short.
            create.append("--bitmap=internal")
        create += members
    # XFS reads the stripe unit and width from md itself; the label names the array.
    mkfs = ["mkfs.xfs", "-L", name[:12], *[str(o) for o in mkfs_options], device]
    return {
        "name": name,
        "level": level,
        "members": members,
        "md": use_md,
        "device": device,
        "create_argv": create,
        "mkfs_argv": mkfs,
        "mount": mount,
        "mount_unit": systemd_mount_unit(mount),
        "mount_options": ",".join(str(o) for o in mount_options),
    }


def mdadm_detail(text: str) -> dict[str, Any]:
    """``mdadm --detail --export DEV`` -> {level, members, spares, name}; ``{}`` without MD_LEVEL.

    Each member appears as ``MD_DEVICE_<dev>_ROLE`` (its slot, or ``spare``) and ``..._DEV`` (path).
    """
    fields = dict(line.strip().split("=", 1) for line in text.splitlines() if "=" in line)
    if "MD_LEVEL" not in fields:
        return {}
    members, spares = [], []
    for key, path in fields.items():
        if key.startswith("MD_DEVICE_") and key.endswith("_DEV"):
            role = fields.get(key[: -len("_DEV")] + "_ROLE", "")
            (spares if role == "spare" else members).append(path)
    level = fields["MD_LEVEL"].removeprefix("raid")
    return {
        "level": int(level) if level.isdigit() else level,
        "members": sorted(members),
        "spares": sorted(spares),
        "name": fields.get("MD_NAME", "").split(":")[-1],
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "nvme_array_plan": nvme_array_plan,
            "mdadm_detail": mdadm_detail,
            "systemd_mount_unit": systemd_mount_unit,
        }
