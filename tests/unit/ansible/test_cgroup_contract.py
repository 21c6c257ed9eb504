"""The cgroup v2 contract check: fails on this machine's v1 layout, passes on a unified tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from provisioning_helpers import run_ansible

UNIFIED_MOUNTINFO = (
    "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
)
HYBRID_MOUNTINFO = (
    "25 1 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755\n"
    "26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5"
    " - cgroup2 cgroup2 rw,nsdelegate\n"
    "28 25 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:7 - cgroup cgroup rw,memory\n"
    "29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:8"
    " - cgroup cgroup rw,cpu,cpuacct\n"
)


def _tree(root: Path, controllers: str) -> Path:
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("\n")
    return root


def test_this_machine_fails_the_contract(cgroup_module):
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip(
            "this machine runs the unified hierarchy; the check is for the v1 layout of the dev machines"
        )
    problems, details = cgroup_module.check_contract(
        "/sys/fs/cgroup", Path("/proc/self/mountinfo").read_text(), ["cpuset", "cpu", "memory"]
    )
    assert problems
    assert "is not a cgroup v2 (unified) hierarchy" in problems[0]
    assert details["controllers"] == []


def test_unified_tree_with_the_controllers_passes(tmp_path, cgroup_module):
    root = _tree(tmp_path / "cgroup", "cpuset cpu io memory hugetlb pids rdma misc")
    problems, details = cgroup_module.check_contract(
        str(root), UNIFIED_MOUNTINFO, ["cpuset", "cpu", "io", "memory", "pids"]
    )
    assert problems == []
    assert details == {
        "controllers": ["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"],
        "v1_hierarchies": [],
    }


def test_unified_tree_missing_a_controller_fails(tmp_path, cgroup_module):
    root = _tree(tmp_path / "cgroup", "cpu io pids")
    problems, _ = cgroup_module.check_contract(str(root), UNIFIED_MOUNTINFO, ["cpuset", "cpu", "memory"])
    assert problems == [f"controllers missing from {root}/cgroup.controllers: cpuset, memory"]


def test_hybrid_layout_fails(tmp_path, cgroup_module):
    # systemd's hybrid mode: cgroup2 at unified/, v1 controllers beside it
    root = _tree(tmp_path / "cgroup", "")
    problems, details = cgroup_module.check_contract(str(root), HYBRID_MOUNTINFO, ["memory"])
    assert details["v1_hierarchies"] == ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu,cpuacct"]
    assert any("refuses hybrid layouts" in p for p in problems)


def _module(tmp_path: Path, args: dict[str, object]) -> tuple[int, dict[str, object]]:
    tree = tmp_path / "tree"
    proc = run_ansible(
        "ansible",
        ["localhost", "-c", "local", "-m", "cgroup_v2_check", "-a", json.dumps(args), "-t", str(tree)],
        tmp_path,
        check=False,
    )
    return proc.returncode, json.loads((tree / "localhost").read_text())


def test_module_through_ansible_passes_on_a_unified_fixture(tmp_path):
    root = _tree(tmp_path / "cgroup", "cpuset cpu io memory pids")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(UNIFIED_MOUNTINFO)
    rc, result = _module(tmp_path, {"root": str(root), "mountinfo": str(mountinfo)})
    assert rc == 0
    assert result["controllers"] == ["cpuset", "cpu", "io", "memory", "pids"]


def test_module_through_ansible_fails_clearly_on_this_machine(tmp_path):
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("this machine runs the unified hierarchy")
    rc, result = _module(tmp_path, {"root": "/sys/fs/cgroup"})
    assert rc != 0
    msg = str(result["msg"])
    assert msg.startswith("cgroup v2 contract not met: /sys/fs/cgroup is not a cgroup v2 (unified) hierarchy")
    assert "cgroup_v2_available: false" in msg
