"""The nvidia and dcgm roles install through apt_pinned: what they hand it for a production GPU
node, rendered by the real Ansible (golden preferences files from apt_pinned's own template), the
version patterns against the versions NVIDIA's repository gives these packages, and the rolling
update bringing a node to exactly the versions the roles install."""

from __future__ import annotations

import json
import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import yaml
from provisioning_helpers import GOLDEN, REPO, render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_pins.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
FILES = ("opsctl-nvidia", "opsctl-nvidia-packages", "opsctl-dcgm")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pins")
    out = tmp / "out"
    out.mkdir()
    render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}")
    return out


def _pinned(rendered: Path) -> dict[str, list[dict[str, str]]]:
    data: dict[str, Any] = json.loads((rendered / "pinned.json").read_text())
    return data


@pytest.mark.parametrize("name", FILES)
def test_production_golden(rendered: Path, name: str) -> None:
    got = (rendered / name).read_text()
    golden = GOLDEN / "production" / f"apt-preferences.{name}"
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} differs from {golden}"


def test_every_package_is_pinned_to_the_matrix_version(rendered: Path) -> None:
    matrix = yaml.safe_load((REPO / "inventory/production/group_vars/all/versions.yml").read_text())
    pinned = _pinned(rendered)
    nvidia = {p["name"]: p["version"] for p in pinned["nvidia"]}
    assert nvidia == {
        "cuda-drivers-550": "550.127.08-*",
        "cuda-drivers-fabricmanager-550": "550.127.08-*",
        "nvidia-fabricmanager-550": "550.127.08-*",
        "libnvidia-nscq-550": "550.127.08-*",
        "nvidia-kernel-open-dkms": "550.127.08-*",  # the dmabuf path: open modules, same transaction
    }
    assert pinned["dcgm"] == [{"name": "datacenter-gpu-manager", "version": f"1:{matrix['dcgm_version']}*"}]
    # apt reads a pin's version as a glob; NVIDIA's CUDA repository for Debian 12 versions these
    # packages <driver>-1 and DCGM 3 with epoch 1 and no revision (1:3.3.9). The previous release
    # of each must not match, or a held older package would count as pinned.
    for pattern in nvidia.values():
        assert fnmatchcase("550.127.08-1", pattern)
        assert not fnmatchcase("550.90.07-1", pattern) and not fnmatchcase("550.127.080-1", pattern)
    assert fnmatchcase("1:3.3.9", pinned["dcgm"][0]["version"])
    assert not fnmatchcase("1:3.3.8", pinned["dcgm"][0]["version"])
    assert not fnmatchcase("3.3.9", pinned["dcgm"][0]["version"])  # the epoch is part of the version


def test_the_rolling_update_installs_exactly_what_the_roles_pin(rendered: Path) -> None:
    """A driver bump goes through playbooks/rolling-update.yml; afterwards the nvidia and dcgm roles
    must find every package at its pin (changed=0), so both name the same packages and versions."""
    pinned = _pinned(rendered)
    roles = {(p["name"], p["version"]) for p in pinned["nvidia"] + pinned["dcgm"]}
    assert {(p["name"], p["version"]) for p in pinned["node_update"]} == roles
