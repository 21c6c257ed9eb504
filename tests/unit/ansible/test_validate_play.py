"""The validate play: passes on the production inventory, stops a broken one before any host changes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from provisioning_helpers import REPO, load_filter_plugin, run_ansible

# Every host is pointed at a closed loopback port: if a check wrongly passed, the next play
# could reach no machine (and no address outside this one).
NOWHERE = ["-e", "ansible_host=127.0.0.1", "-e", "ansible_port=1"]
# The refusal cases run on two hosts: the play's checks read the whole inventory (groups and
# hostvars) whatever the limit, and the per-host argument check needs only one host to refuse; the
# passing case runs on every host. (A run over all 70 hosts costs about 20 s here.)
TWO_HOSTS = ["--limit", "head-01,gpu-001"]


def guide_block(step: str) -> str:
    """The command block after docs/getting-started.md's `<!-- step: STEP -->` marker."""
    text = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    return text.split(f"<!-- step: {step} -->", 1)[1].split("```")[1].strip()


def test_production_inventory_passes(tmp_path):
    """docs/getting-started.md steps 2 and 5 as written: the inventory block makes the site's copy
    of the template (run beside a copy of inventory/production, so the checkout is left alone),
    and the validate block passes on it, with every production host."""
    work = tmp_path / "checkout"
    shutil.copytree(REPO / "inventory" / "production", work / "inventory" / "production")
    script = guide_block("inventory") + '\necho "ANSIBLE_INVENTORY=$ANSIBLE_INVENTORY"\n'
    made = subprocess.run(["bash", "-euc", script], cwd=work, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    site = work / made.stdout.strip().splitlines()[-1].split("=", 1)[1]
    assert (site / "hosts.yml").is_file() and site.parent == work / "inventory"
    (validate,) = guide_block("validate").splitlines()
    # the second play reads the GPU nodes' packages, which NOWHERE cannot reach (the lab test has it)
    argv = [*validate.split()[1:], "-i", str(site), *NOWHERE, "-e", "validate_pins_in_service=false"]
    proc = run_ansible("ansible-playbook", argv, tmp_path)
    assert "failed=0" in proc.stdout
    assert "gpu-064" in proc.stdout


def test_a_broken_version_matrix_stops_site_yml_in_the_validate_play(tmp_path):
    proc = run_ansible(
        "ansible-playbook",
        ["site.yml", "-e", "nvidia_fabricmanager_version=550.90.07", *NOWHERE, *TWO_HOSTS],
        tmp_path,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    want = "version matrix broken: driver 550.127.08 (branch 550), fabric manager 550.90.07"
    assert f"{want} (must equal the driver)" in out
    plays = [line for line in proc.stdout.splitlines() if line.startswith("PLAY [")]
    assert len(plays) == 1 and plays[0].startswith("PLAY [Validate the inventory before changing anything]")


def test_unpinned_versions_are_refused(tmp_path):
    proc = run_ansible(
        "ansible-playbook",
        ["playbooks/validate.yml", "-e", "dcgm_version=latest", "-e", "slurm_version=22.*",
         *NOWHERE, *TWO_HOSTS],
        tmp_path,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "versions must be pinned to a release: dcgm_version=latest, slurm_version=22.*" in out


def test_gpu_nodes_expecting_other_hcas_than_the_sites_fabric_are_refused(tmp_path):
    # ib_fabric_hcas decides what the checks and the alert rules judge; hw_expected what a node must
    # have. A fabric list that drifted from it would leave a node's HCAs unwatched.
    proc = run_ansible(
        "ansible-playbook",
        ["playbooks/validate.yml", "-e", '{"ib_fabric_hcas": ["mlx5_0", "mlx5_3"]}', *NOWHERE, *TWO_HOSTS],
        tmp_path,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    want = "hw_expected.ib_hcas differs from ib_fabric_hcas (mlx5_0, mlx5_3) on 64 GPU nodes: gpu-001,"
    assert want in out


def test_a_dcgm_exporter_without_the_per_xid_count_is_refused(tmp_path):
    # dcgm-exporter before 3.3.5-3.4.0 has no DCGM_EXP_* collectors: it refuses the counters file's
    # XID count row and does not start (pkg/dcgmexporter/parser.go at 3.3.3-3.3.1)
    versions = {"dcgm_version": "3.3.3", "dcgm_exporter_version": "3.3.3-3.3.1"}
    argv = ["playbooks/validate.yml", "-e", json.dumps(versions), *NOWHERE, *TWO_HOSTS]
    proc = run_ansible("ansible-playbook", argv, tmp_path, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    want = "dcgm-exporter 3.3.3-3.3.1 has no per-XID count (DCGM_EXP_XID_ERRORS_COUNT, from 3.3.5-3.4.0)"
    assert want in out


def test_a_gpu_node_in_two_partitions_is_refused(tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "production", inv)
    slurm = inv / "group_vars" / "all" / "slurm.yml"
    data = yaml.safe_load(slurm.read_text())
    data["slurm_partitions"].append({"name": "debug", "group": "debug_nodes"})
    slurm.write_text(yaml.safe_dump(data))
    (inv / "debug.yml").write_text(
        "all:\n  children:\n    debug_nodes:\n      hosts:\n        gpu-063:\n        gpu-064:\n"
    )
    argv = ["-i", str(inv), "playbooks/validate.yml", *NOWHERE, *TWO_HOSTS]
    proc = run_ansible("ansible-playbook", argv, tmp_path, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "not so for: gpu-063 (2 partitions), gpu-064 (2 partitions)" in out


def test_a_gpu_node_without_the_fabric_unit_the_others_name_is_refused(tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "production", inv)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "gpu-007.yml").write_text('fabric_unit: ""\n')
    argv = ["-i", str(inv), "playbooks/validate.yml", *NOWHERE, *TWO_HOSTS]
    proc = run_ansible("ansible-playbook", argv, tmp_path, check=False)
    assert proc.returncode != 0
    want = "1 of 64 hosts of 'gpu_nodes' set no fabric_unit while the others do: gpu-007"
    assert want in proc.stdout + proc.stderr


def test_a_wrongly_typed_role_argument_is_refused(tmp_path):
    proc = run_ansible(
        "ansible-playbook",
        ["playbooks/validate.yml", "-e", '{"slurm_partitions": "gpu"}', *NOWHERE, *TWO_HOSTS],
        tmp_path,
        check=False,
    )
    assert proc.returncode != 0
    assert "slurm_partitions" in proc.stdout + proc.stderr


def test_inventory_files_are_examples():
    text = (REPO / "inventory" / "production" / "hosts.yml").read_text()
    assert "EXAMPLE" in text
    assert (
        Path(REPO / "inventory" / "production" / "group_vars" / "gpu_nodes.yml").read_text().count("EXAMPLE")
        >= 1
    )


def _pin_drift():  # type: ignore[no-untyped-def]
    return load_filter_plugin("validate", "pins").pin_drift


def test_pin_drift_names_installed_packages_off_their_pin():
    pins = [
        {"name": "cuda-drivers-550", "version": "550.127.08-*"},
        {"name": "datacenter-gpu-manager", "version": "1:3.3.9*"},
        {"name": "nvidia-kernel-open-dkms", "version": "550.127.08-*"},
    ]
    dpkg = [
        "cuda-drivers-550 550.127.08-1 hi",  # held, on its pin
        "datacenter-gpu-manager 1:3.3.6-1 hi",  # held, older
        "nvidia-kernel-open-dkms 550.90.07-1 rc",  # removed, config files only: not running
    ]
    assert _pin_drift()(dpkg, pins) == ["datacenter-gpu-manager 1:3.3.6-1 (pinned 1:3.3.9*)"]
    assert _pin_drift()([], pins) == []  # nothing installed yet: a first install, no drift


def test_a_gpu_node_off_its_pins_is_refused_when_slurm_cannot_say_it_is_out_of_service(tmp_path):
    """validate.yml's second play on this machine as gpu-001 (a local connection): its dpkg is not at
    the pinned version and this machine's Slurm has no configuration to answer with, so the node may
    be in service and the run stops; at the installed version it passes. (The lab shows a node Slurm
    has in service refused: tests/integration/lab/test_lab_lifecycle.py.)"""
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "production", inv)
    (inv / "host_vars").mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "slurm.conf").write_text("ClusterName=nowhere\n")  # no controller: sinfo fails at once
    env = {"SLURM_CONF": str(tmp_path / "slurm.conf")}
    for version, refused in (("0.0-1", True), ("*", False)):
        pins = {**local, "node_update_packages": [{"name": "dpkg", "version": version}]}
        (inv / "host_vars" / "gpu-001.yml").write_text(yaml.safe_dump(pins))
        argv = ["-i", str(inv), "playbooks/validate.yml", "--limit", "gpu-001"]
        proc = run_ansible("ansible-playbook", argv, tmp_path, check=False, env=env)
        out = proc.stdout + proc.stderr
        if refused:
            assert proc.returncode != 0, out
            assert "gpu-001 may be in service (Slurm could not say) and runs dpkg " in out, out
            assert "(pinned 0.0-1): site.yml would change them under its jobs" in out, out
        else:
            assert proc.returncode == 0 and "failed=0" in proc.stdout, out
