from pathlib import Path

import pytest

from opsctl.errors import UsageError
from opsctl.lab.config import LabConfig, from_env


def test_default_layout_is_head_plus_three_gpu_nodes_on_the_lab_subnet() -> None:
    cfg = LabConfig()
    assert [(m.name, m.address, m.role) for m in cfg.machines] == [
        ("head-01", "10.213.0.10", "head"),
        ("gpu-001", "10.213.0.11", "gpu"),
        ("gpu-002", "10.213.0.12", "gpu"),
        ("gpu-003", "10.213.0.13", "gpu"),
    ]
    assert cfg.host_address == "10.213.0.1"
    assert cfg.bridge == "labbr0"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpu_nodes": 0},
        {"gpu_nodes": 65},
        {"subnet": "10.213.0.0/33"},
        {"subnet": "10.213.0.0/29"},
        {"bridge": "a-name-longer-than-15"},
        {"bridge": "br;rm"},
    ],
)
def test_bad_settings_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        LabConfig(**kwargs)  # type: ignore[arg-type]


def test_machine_lookup_rejects_unknown_names() -> None:
    cfg = LabConfig(gpu_nodes=2)
    assert cfg.machine("gpu-002").address == "10.213.0.12"
    with pytest.raises(UsageError, match="gpu-009"):
        cfg.machine("gpu-009")


def test_environment_overrides_paths_and_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPSCTL_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPSCTL_LAB_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("OPSCTL_LAB_SUBNET", "10.99.0.0/24")
    monkeypatch.setenv("OPSCTL_LAB_BRIDGE", "testbr1")
    cfg = from_env(2)
    assert cfg.cache_dir == tmp_path / "cache"
    assert cfg.ssh_key == tmp_path / "state" / "id_ed25519"
    assert cfg.head.address == "10.99.0.10"
    assert cfg.bridge == "testbr1"
    assert len(cfg.gpu_machines) == 2
