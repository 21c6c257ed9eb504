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


def test_a_simulated_package_is_a_real_deb_in_an_indexed_flat_repository(tmp_path: Path) -> None:
    import hashlib
    import subprocess

    from opsctl.lab.packages import build_sim_package, render_sources_list, write_repo_index

    repo = tmp_path / "repo"
    for version in ("1.0-1", "1.1-1"):
        build_sim_package(repo, "opsctl-labsim-driver", version)
    write_repo_index(repo)
    deb = repo / "opsctl-labsim-driver_1.1-1_all.deb"
    files = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True)
    assert "./usr/share/opsctl-labsim/opsctl-labsim-driver/VERSION" in files.stdout
    stanzas = [
        dict(ln.split(": ", 1) for ln in s.splitlines() if ": " in ln)
        for s in (repo / "Packages").read_text().split("\n\n")
        if s.strip()
    ]
    assert [(s["Package"], s["Version"]) for s in stanzas] == [
        ("opsctl-labsim-driver", "1.0-1"),
        ("opsctl-labsim-driver", "1.1-1"),
    ]
    assert stanzas[1]["Filename"] == f"./{deb.name}"
    assert stanzas[1]["SHA256"] == hashlib.sha256(deb.read_bytes()).hexdigest()
    release = (repo / "Release").read_text()
    assert hashlib.sha256((repo / "Packages").read_bytes()).hexdigest() in release
    assert "deb [trusted=yes] file:/srv/opsctl-lab-repo ./" in render_sources_list()


def test_package_names_and_versions_are_checked(tmp_path: Path) -> None:
    from opsctl.lab.packages import build_sim_package

    with pytest.raises(ConfigError, match="package name"):
        build_sim_package(tmp_path, "Bad Name", "1.0")
    with pytest.raises(ConfigError, match="not a Debian version"):
        build_sim_package(tmp_path, "ok-name", "v1; rm -rf /")
