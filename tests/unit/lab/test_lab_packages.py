from pathlib import Path

import pytest

from opsctl.errors import ConfigError
from opsctl.lab.packages import BASELINE_PACKAGES, collect_packages, packages_from_defaults


def test_only_keys_ending_in_packages_are_read() -> None:
    text = """
slurm_packages: [slurmd, slurm-client]
munge_packages: munge
slurm_packages_extra_note: ignored
node_exporter_package: not-a-list-key
packages_dir: /var/cache
"""
    assert packages_from_defaults(text) == ["slurmd", "slurm-client", "munge"]


def test_templated_and_non_string_items_are_skipped() -> None:
    text = (
        "gpu_packages:\n  - 'nvidia-driver-{{ nvidia_driver_branch }}'\n  - datacenter-gpu-manager\n  - 3\n"
    )
    assert packages_from_defaults(text) == ["datacenter-gpu-manager"]


def test_empty_and_invalid_defaults(tmp_path: Path) -> None:
    assert packages_from_defaults("") == []
    with pytest.raises(ConfigError):
        packages_from_defaults("- a\n- b\n", "x.yml")
    with pytest.raises(ConfigError):
        packages_from_defaults("a: [\n", "x.yml")


def test_collect_unions_roles_with_the_baseline(tmp_path: Path) -> None:
    for role, text in {
        "slurm": "slurm_packages: [slurmd, slurmctld]\n",
        "monitoring": "monitoring_packages: [prometheus, jq]\nmonitoring_port: 9090\n",
        "empty": "",
    }.items():
        d = tmp_path / "roles" / role / "defaults"
        d.mkdir(parents=True)
        (d / "main.yml").write_text(text)
    got = collect_packages(tmp_path)
    assert got == sorted(set(BASELINE_PACKAGES) | {"jq"})
    assert collect_packages(tmp_path, baseline=()) == ["jq", "prometheus", "slurmctld", "slurmd"]
