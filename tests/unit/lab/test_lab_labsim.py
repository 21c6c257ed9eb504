import configparser

import pytest

from opsctl.errors import UsageError
from opsctl.lab import faults, labsim
from opsctl.lab.config import LabConfig


def test_exporter_unit_serves_dcgm_on_port_9400_from_the_nodes_state_and_the_roles_counters() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(labsim.render_exporter_unit("gpu-001"))
    start = parser["Service"]["ExecStart"].split()
    assert start[:3] == ["/usr/bin/python3", "-m", labsim.EXPORTER_MODULE]
    assert start[start.index("--node") + 1] == "gpu-001=9400"
    assert start[start.index("--state-dir") + 1] == "/var/lib/hwsim"
    assert start[start.index("--listen") + 1] == "0.0.0.0"
    # only dcgm-exporter (the machine runs the real node_exporter), with the file the dcgm role writes
    assert start[start.index("--serve") + 1] == "dcgm"
    assert start[start.index("--collectors") + 1] == "/etc/dcgm-exporter/default-counters.csv"
    path = configparser.ConfigParser(strict=False, interpolation=None)
    path.optionxform = str  # type: ignore[assignment,method-assign]
    path.read_string(labsim.render_exporter_path_unit())
    assert path["Path"]["PathExists"] == "/etc/dcgm-exporter/default-counters.csv"
    assert path["Path"]["Unit"] == labsim.EXPORTER_UNIT
    assert path["Install"]["WantedBy"] == "multi-user.target"


def test_only_gpu_machines_get_the_state_bind_mount(tmp_path: object) -> None:
    cfg = LabConfig(gpu_nodes=1)
    assert labsim.bind_args(cfg, cfg.head) == []
    (arg,) = labsim.bind_args(cfg, cfg.machine("gpu-001"))
    assert arg.startswith("--bind=") and arg.endswith(":/var/lib/hwsim")


def test_faults_are_refused_on_the_head_and_unknown_nodes() -> None:
    cfg = LabConfig(gpu_nodes=1)
    with pytest.raises(UsageError, match="head"):
        faults.inject(cfg, "head-01", "xid=79")
    with pytest.raises(UsageError, match="gpu-007"):
        faults.heal(cfg, "gpu-007")
