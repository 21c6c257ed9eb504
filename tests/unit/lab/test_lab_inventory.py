from pathlib import Path

import yaml

from opsctl.lab.config import LabConfig
from opsctl.lab.inventory import inventory_data, write_inventory

REPO = Path(__file__).resolve().parents[3]
PRODUCTION_GROUPS = {
    "slurm_controller",
    "slurm_compute",
    "gpu_nodes",
    "monitoring",
    "nfs_server",
    "nfs_clients",
    "lustre_clients",
}


def _members(data: dict, group: str) -> set[str]:
    """Hosts of a group, following children like Ansible does."""
    node = data["all"]["children"][group] or {}
    out = set((node.get("hosts") or {}).keys())
    for child in node.get("children") or {}:
        out |= _members(data, child)
    return out


def test_every_production_group_exists_with_the_right_machines(tmp_path: Path) -> None:
    cfg = LabConfig(gpu_nodes=2, state_dir=tmp_path)
    data = inventory_data(cfg)
    assert set(data["all"]["children"]) >= PRODUCTION_GROUPS
    gpus = {"gpu-001", "gpu-002"}
    assert _members(data, "gpu_nodes") == gpus
    assert _members(data, "slurm_compute") == gpus
    assert _members(data, "lustre_clients") == gpus
    assert _members(data, "slurm_controller") == {"head-01"}
    assert _members(data, "slurmdbd") == {"head-01"}
    assert _members(data, "monitoring") == {"head-01"}
    assert _members(data, "alertmanager") == {"head-01"}


def test_every_group_a_play_targets_is_declared(tmp_path: Path) -> None:
    """A play whose group the inventory lacks is skipped with only a warning ("Could not match
    supplied host pattern"): Alertmanager went unconverged in the lab that way."""
    data = inventory_data(LabConfig(gpu_nodes=2, state_dir=tmp_path))
    declared = set(data["all"]["children"]) | {"all", "localhost"}
    targeted: set[str] = set()
    for book in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(book.read_text()) or []:
            hosts = str(play.get("hosts", ""))
            if hosts and "{{" not in hosts:
                targeted.update(hosts.split(":"))
    assert {"alertmanager", "monitoring", "grafana", "remediation"} <= targeted
    assert targeted - declared == set()


def test_secrets_and_the_rolling_update_s_opsctl_belong_to_the_lab(tmp_path: Path) -> None:
    import sys

    data = inventory_data(LabConfig(gpu_nodes=1, state_dir=tmp_path))
    lab_vars = data["all"]["vars"]
    assert lab_vars["secrets_dir"] == str(tmp_path / "secrets")
    assert lab_vars["node_update_opsctl_command"] == [sys.executable, "-m", "opsctl"]
    assert lab_vars["node_update_opsctl_config"] == str(tmp_path / "opsctl.toml")


def test_hosts_carry_addresses_and_the_lab_key(tmp_path: Path) -> None:
    cfg = LabConfig(gpu_nodes=1, state_dir=tmp_path)
    data = inventory_data(cfg)
    hosts: dict[str, dict[str, str]] = {}
    for group in data["all"]["children"].values():
        hosts.update((group or {}).get("hosts") or {})
    assert hosts["head-01"]["ansible_host"] == "10.213.0.10"
    assert hosts["gpu-001"]["ansible_host"] == "10.213.0.11"
    assert data["all"]["vars"]["ansible_ssh_private_key_file"] == str(tmp_path / "id_ed25519")
    assert data["all"]["vars"]["ansible_user"] == "root"


def test_written_inventory_round_trips_and_carries_the_lab_limits(tmp_path: Path) -> None:
    cfg = LabConfig(gpu_nodes=2, state_dir=tmp_path / "state")
    out = tmp_path / "inv"
    path = write_inventory(cfg, out, REPO / "inventory" / "lab" / "group_vars")
    assert yaml.safe_load(path.read_text()) == inventory_data(cfg)
    flags = yaml.safe_load((out / "group_vars" / "all" / "lab.yml").read_text())
    for name in (
        "gpu_hardware_present",
        "infiniband_hardware_present",
        "cgroup_v2_available",
        "lustre_kernel_mounts",
        "nfs_kernel_mounts",
        "nvme_raid_available",
    ):
        assert flags[name] is False


def test_production_inventory_never_references_the_lab_simulators() -> None:
    production = REPO / "inventory" / "production"
    for f in production.rglob("*") if production.exists() else []:
        if f.is_file():
            text = f.read_text()
            assert "labsim" not in text and "opsctl.hwsim" not in text, f
