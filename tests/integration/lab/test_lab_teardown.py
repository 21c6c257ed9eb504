"""The last lab module: `opsctl lab down` on the shared lab (conftest.py) leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_helpers import RunningLab

from opsctl.lab import machines, net

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(600)]


def test_down_leaves_no_bridge_veth_mount_or_process(lab: RunningLab) -> None:
    state_dir = lab.cfg.state_dir
    lab.opsctl("down")
    assert not net.bridge_exists(lab.cfg.bridge)
    assert net.lab_veths(lab.cfg) == []
    assert machines.running(lab.cfg) == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(state_dir) not in mounts
    assert not state_dir.exists()
    assert not (lab.inventory / "hosts.yml").exists()
    # A second down finds nothing to do and still succeeds.
    assert "nothing to remove" in lab.opsctl("down").stdout
