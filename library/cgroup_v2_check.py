#!/usr/bin/python
# Copyright: opsctl contributors
# Apache License 2.0 (see the repository's pyproject.toml)
"""Ansible module: check the cgroup v2 contract Slurm's cgroup/v2 plugin depends on."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: cgroup_v2_check
short_description: Check that a node runs the unified cgroup v2 hierarchy with the controllers Slurm needs
description:
  - Slurm's C(cgroup/v2) plugin (C(proctrack/cgroup), C(task/cgroup), C(jobacct_gather/cgroup)) needs
    the unified hierarchy mounted at I(root) alone, with the listed controllers available.
  - Fails with one clear sentence when I(root) is not a cgroup2 mount, when cgroup v1 hierarchies are
    mounted beside it (hybrid layout, which slurmd rejects), or when a controller is missing.
version_added: "0.1.0"
author: opsctl contributors
options:
  root:
    description: Where the cgroup hierarchy is mounted.
    type: path
    default: /sys/fs/cgroup
  mountinfo:
    description: The mount table to read (C(/proc/self/mountinfo) format).
    type: path
    default: /proc/self/mountinfo
  controllers:
    description: Controllers that must be listed in I(root)/cgroup.controllers.
    type: list
    elements: str
    default: [cpuset, cpu, io, memory, pids]
notes:
  - Supports check mode (the module only reads).
"""

EXAMPLES = r"""
- name: Check the cgroup v2 contract before starting slurmd
  cgroup_v2_check:
    controllers: [cpuset, cpu, memory, pids]
"""

RETURN = r"""
controllers:
  description: The controllers listed in cgroup.controllers at the root.
  returned: always
  type: list
  elements: str
v1_hierarchies:
  description: cgroup v1 hierarchies found in the mount table (their mount points).
  returned: always
  type: list
  elements: str
"""


def v1_mounts(mountinfo_text: str) -> list[str]:
    """Mount points of cgroup (v1) file systems in a mountinfo table."""
    out = []
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        post = line.split(" - ", 1)[1].split()
        if post and post[0] == "cgroup":
            out.append(fields[4])
    return out


def check_contract(root: str, mountinfo_text: str, required: list[str]) -> tuple[list[str], dict[str, Any]]:
    """(problems, details) for the cgroup tree at ``root``; no problems means the contract holds."""
    problems: list[str] = []
    controllers_path = os.path.join(root, "cgroup.controllers")
    try:
        with open(controllers_path, encoding="utf-8") as fh:
            controllers = fh.read().split()
    except OSError:
        controllers = []
        problems.append(f"{root} is not a cgroup v2 (unified) hierarchy: {controllers_path} does not exist")
    v1 = v1_mounts(mountinfo_text)
    if v1:
        problems.append(
            "cgroup v1 hierarchies are mounted ("
            + ", ".join(v1[:6])
            + ("..." if len(v1) > 6 else "")
            + "): slurmd's cgroup/v2 plugin refuses hybrid layouts"
        )
    missing = [c for c in required if c not in controllers]
    if controllers and missing:
        problems.append(f"controllers missing from {controllers_path}: {', '.join(missing)}")
    return problems, {"controllers": controllers, "v1_hierarchies": v1}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/sys/fs/cgroup"},
            "mountinfo": {"type": "path", "default": "/proc/self/mountinfo"},
            "controllers": {
                "type": "list",
                "elements": "str",
                "default": ["cpuset", "cpu", "io", "memory", "pids"],
            },
        },
        supports_check_mode=True,
    )
    try:
        with open(module.params["mountinfo"], encoding="utf-8") as fh:
            mountinfo = fh.read()
    except OSError as exc:
        module.fail_json(msg=f"cgroup v2 contract: cannot read {module.params['mountinfo']}: {exc}")
    problems, details = check_contract(module.params["root"], mountinfo, module.params["controllers"])
    if problems:
        module.fail_json(
            msg="cgroup v2 contract not met: "
            + "; ".join(problems)
            + ". Boot with systemd.unified_cgroup_hierarchy=1 (the default since systemd 247), or set"
            " cgroup_v2_available: false for a lab that cannot (Slurm then runs without cgroup"
            " confinement).",
            changed=False,
            **details,
        )
    module.exit_json(changed=False, **details)


if __name__ == "__main__":
    main()
