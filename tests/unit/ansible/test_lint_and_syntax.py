"""ansible-lint (production profile, no skip list), which also runs `ansible-playbook
--syntax-check` on every playbook and role it lints (its syntax-check rule)."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from provisioning_helpers import REPO, run_ansible

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())


def test_ansible_lint_production_profile_is_clean(tmp_path):
    proc = run_ansible(
        "ansible-lint",
        [
            "--offline",
            "--profile",
            "production",
            "--nocolor",
            "-f",
            "pep8",
            "site.yml",
            "playbooks",
            "roles",
            "inventory/production",
        ],
        tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Profile 'production' was required, and it passed" in proc.stderr


def test_site_is_a_short_list_of_imports_with_validate_first():
    plays = yaml.safe_load((REPO / "site.yml").read_text())
    assert all(set(p) == {"name", "ansible.builtin.import_playbook"} for p in plays)
    assert plays[0]["ansible.builtin.import_playbook"] == "playbooks/validate.yml"


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_argument_specs(role):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults_file = REPO / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) or {}
    assert set(defaults) <= set(options), f"{role}: defaults without a spec: {set(defaults) - set(options)}"


@pytest.mark.parametrize("role", ROLES)
def test_every_installed_package_is_named_in_a_packages_default(role):
    """The lab collects roles/*/defaults/main.yml keys ending in _packages to build its offline image."""
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    files = sorted((REPO / "roles" / role / "tasks").glob("*.yml"))
    tasks = [(f, t) for f in files for t in yaml.safe_load(f.read_text()) or []]
    # a fact the role sets from its *_packages lists (the slurm role's per-host list) stands for them
    facts = {k: str(v) for _, t in tasks for k, v in (t.get("ansible.builtin.set_fact") or {}).items()}
    for tasks_file, task in tasks:
        if "ansible.builtin.apt" not in task or "name" not in task["ansible.builtin.apt"]:
            continue
        name = str(task["ansible.builtin.apt"]["name"])
        name += "".join(facts.get(var, "") for var in re.findall(r"\{\{\s*(\w+)\s*\}\}", name))
        used = set(re.findall(r"\b(\w+_packages)\b", name))
        assert used, f"{tasks_file}: {task['name']} installs packages not named in a *_packages default"
        for var in used:
            assert isinstance(defaults.get(var), list), f"{role}: {var} is not a list in defaults/main.yml"


def test_no_secret_in_the_repository():
    for path in [*(REPO / "roles").rglob("*"), *(REPO / "inventory" / "production").rglob("*")]:
        if path.is_file() and path.suffix in {".yml", ".j2"}:
            text = path.read_text()
            assert not re.search(r"(?i)(password|pass|key)\s*:\s*['\"]?[A-Za-z0-9+/]{16,}", text), path


def test_hardware_steps_are_gated_with_a_reason():
    for flag, roles in {
        "gpu_hardware_present": ["nvidia", "dcgm", "hw_facts"],
        "infiniband_hardware_present": ["common", "hw_facts"],
        "cgroup_v2_available": ["slurm"],
        "lustre_kernel_mounts": ["lustre_client"],
        "nfs_kernel_mounts": ["nfs_client", "nfs_server"],
        "nvme_raid_available": ["nvme_array"],
    }.items():
        for role in roles:
            text = "".join(p.read_text() for p in (REPO / "roles" / role).rglob("*.yml"))
            assert f"{flag} | default(true)" in text, f"{role}: {flag} not mapped with default true"
            assert f"{flag}=false" in text, f"{role}: no skip message naming {flag}"


def test_ansible_cfg_runs_from_the_repository_root():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    d = cfg["defaults"]
    assert (d["inventory"], d["roles_path"], d["library"], d["module_utils"]) == (
        "./inventory/production",
        "./roles",
        "./library",
        "./opsctl/parsers",
    )


def test_prometheus_role_finds_the_repository_alert_rules_and_promtool_accepts_them(tmp_path):
    defaults = yaml.safe_load((REPO / "roles" / "prometheus" / "defaults" / "main.yml").read_text())
    glob = defaults["prometheus_rules_src_glob"].replace(
        "{{ role_path }}", str(REPO / "roles" / "prometheus")
    )
    rules = sorted(Path(glob).parent.resolve().glob(Path(glob).name))
    assert rules, f"no alert rules match {glob}"
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    for rule in rules:
        proc = subprocess.run(
            [promtool, "check", "rules", str(rule)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
