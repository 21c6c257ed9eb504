"""The alertmanager and opsctl_remediation roles, and the prometheus role's alerting, rendered by the
real Ansible for the production inventory through each role's render tasks, then checked by the
tools that read them: amtool, promtool, systemd-analyze and opsctl's own config loader."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from provisioning_helpers import GOLDEN, render_playbook

from opsctl.checks.settings import HealthSection
from opsctl.config import parse_config
from opsctl.remediation.settings import RemediatorSection

PLAYBOOK = "tests/unit/ansible/playbooks/render_monitoring.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
GOLDEN_FILES = ("alertmanager.yml", "opsctl.toml", "opsctl-remediation.service", "prometheus.yml")


def render(out: Path, tmp: Path, *extra: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}", *extra)
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("render")
    return render(tmp / "out", tmp)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not installed (scripts/bootstrap.sh installs it)", pytrace=False)
    return path


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_production_golden(rendered, name):
    got = (rendered / name).read_text().replace(str(rendered), "/etc/opsctl")
    golden = GOLDEN / "production" / name
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} differs from {golden}"


def test_alertmanager_config_is_valid_and_routes_by_severity(rendered):
    conf = str(rendered / "alertmanager.yml")
    check = subprocess.run([tool("amtool"), "check-config", conf], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout

    def receiver(*labels: str) -> str:
        out = subprocess.run(
            [tool("amtool"), "config", "routes", "test", f"--config.file={conf}", *labels],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return out.stdout.strip()

    assert receiver("alertname=OpsctlRemediationStorm", "severity=page") == "page"
    assert receiver("alertname=OpsctlRemediationBrakeHeld", "severity=ticket") == "ticket"
    assert receiver("alertname=GpuFatalXid", "severity=critical") == "ticket"  # unknown severity: a ticket
    receivers = {
        r["name"]: r for r in yaml.safe_load((rendered / "alertmanager.yml").read_text())["receivers"]
    }
    assert (
        receivers["page"]["webhook_configs"][0]["url"] == "https://pager.example.internal/hooks/alertmanager"
    )


def test_amtool_refuses_a_broken_override(tmp_path):
    # the role's validate step is amtool: a route to an undefined receiver never reaches the host
    proc = render_playbook(
        PLAYBOOK, tmp_path, "-e", f"render_dest={tmp_path}",
        "-e", json.dumps({"alertmanager_config": {"route": {"receiver": "nobody"}}}), check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "failed to validate" in proc.stdout + proc.stderr
    assert not (tmp_path / "alertmanager.yml").exists()


def test_prometheus_sends_alerts_to_alertmanager_and_scrapes_the_service(rendered):
    conf = rendered / "prometheus.yml"
    # the full check, not only the syntax: scrape configs, relabelling, file_sd paths
    check = subprocess.run(
        [tool("promtool"), "check", "config", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    doc = yaml.safe_load(conf.read_text())
    assert doc["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["10.10.0.10:9093"]}]}]
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert jobs["opsctl-remediation"]["static_configs"] == [
        {"targets": ["10.10.0.10:9105"], "labels": {"instance": "head-01"}}
    ]
    assert jobs["training"]["file_sd_configs"] == [{"files": ["/etc/prometheus/file_sd/training/*.json"]}]


def test_every_target_is_named_by_its_inventory_host(rendered):
    """Targets are reached at ansible_host, and `instance` is the inventory (Slurm) name: the node
    name opsctl reads from node_exporter series, as it reads dcgm-exporter's Hostname."""
    doc = yaml.safe_load((rendered / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    node = {c["labels"]["instance"]: c["targets"] for c in jobs["node"]["static_configs"]}
    dcgm = {c["labels"]["instance"]: c["targets"] for c in jobs["dcgm-exporter"]["static_configs"]}
    assert len(node) == 67 and len(dcgm) == 64  # every host; the 64 GPU nodes
    assert node["gpu-017"] == ["10.10.1.17:9100"] and dcgm["gpu-064"] == ["10.10.1.64:9400"]
    assert node["head-01"] == ["10.10.0.10:9100"]


def test_opsctl_toml_loads_in_opsctl_with_the_site_overrides(rendered):
    cfg = parse_config((rendered / "opsctl.toml").read_text(), rendered / "opsctl.toml")
    r = cfg.section("remediator", RemediatorSection)
    assert (r.alertmanager_url, r.metrics_address, r.interval) == (
        "http://head-01:9093",
        "0.0.0.0:9105",
        15.0,  # the scrape interval (roles/prometheus prometheus_scrape_interval)
    )
    assert r.pause_file == "/var/lib/opsctl/remediator-paused.json"
    h = cfg.section("health", HealthSection)
    assert (h.max_drains, h.max_fraction, h.brake_window) == (2, 0.10, 3600.0)  # group_vars/remediation.yml
    assert h.state_file == "/var/lib/opsctl/health-state.json"
    assert cfg.prometheus.url == "http://head-01:9090"
    assert cfg.slurm.partition == "gpu" and cfg.audit.log == "/var/log/opsctl/audit.jsonl"


def test_site_overrides_combine_per_key_and_render_as_toml(tmp_path):
    overrides = {
        "opsctl_remediation_config": {
            "remediator": {"interval": 5, "alertmanager_url": ""},
            "health": {
                "ssh_addresses": {"gpu-001": "10.0.0.1:2222", "gpu-002": "10.0.0.2"},
                "shadow": True,
                "expected_gpus": None,
            },
        },
        "opsctl_remediation_alertmanager_group": "no_such_group",
    }
    out = render(tmp_path / "out", tmp_path, "-e", json.dumps(overrides))
    text = (out / "opsctl.toml").read_text()
    assert 'ssh_addresses = { "gpu-001" = "10.0.0.1:2222", "gpu-002" = "10.0.0.2" }' in text
    cfg = parse_config(text, out / "opsctl.toml")
    r = cfg.section("remediator", RemediatorSection)
    assert (r.interval, r.alertmanager_url) == (5.0, "")  # "" and null keys are left to opsctl's defaults
    assert r.metrics_address == "0.0.0.0:9105"  # the other keys of the section stay
    h = cfg.section("health", HealthSection)
    assert h.shadow is True and h.ssh_addresses == {"gpu-001": "10.0.0.1:2222", "gpu-002": "10.0.0.2"}
    assert h.max_drains == 2 and h.expected_gpus is None


def test_the_unit_passes_systemd_analyze_verify(rendered, tmp_path):
    unit = tmp_path / "opsctl-remediation.service"
    # rendered with the config directory redirected to the render directory, as in the golden file
    text = (rendered / "opsctl-remediation.service").read_text().replace(str(rendered), "/etc/opsctl")
    # verify checks that ExecStart exists: point it at this interpreter's opsctl
    opsctl = Path(sys.executable).parent / "opsctl"
    if not opsctl.exists():
        pytest.skip(f"no opsctl entry point next to {sys.executable}")
    unit.write_text(text.replace("/opt/opsctl/venv/bin/opsctl", str(opsctl)))
    proc = subprocess.run(
        [tool("systemd-analyze"), "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert str(unit) not in proc.stderr, proc.stderr  # no unknown key, no bad value
    assert f"ExecStart={opsctl} --config /etc/opsctl/opsctl.toml remediator run\n" in unit.read_text()
    assert "Restart=on-failure\n" in text and "ReadWritePaths=/var/lib/opsctl /var/log/opsctl\n" in text


PRODUCTION_FABRIC = [f"mlx5_{i}" for i in range(8)]


def _relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str]:
    """Prometheus's `replace` relabelling (the default action): the source labels joined by ';'
    against the fully anchored regex, the replacement with its groups expanded."""
    import re

    out = dict(labels)
    for r in rules:
        assert r.get("action", "replace") == "replace", r
        joined = r.get("separator", ";").join(out.get(s, "") for s in r["source_labels"])
        m = re.fullmatch(r.get("regex", "(.*)"), joined)
        if m:
            value = m.expand(r.get("replacement", "$1").replace("$", "\\"))
            if value:
                out[r["target_label"]] = value
            else:
                out.pop(r["target_label"], None)
    return out


def _fabric(job: dict, device: str, name: str = "node_infiniband_state_id") -> str | None:
    rules = job.get("metric_relabel_configs") or []
    return _relabel(rules, {"__name__": name, "device": device, "port": "1"}).get("fabric")


def test_the_inventorys_fabric_hcas_reach_the_checks_and_the_rules(rendered):
    """The fabric HCAs of group_vars/all (ib_fabric_hcas, also the GPU nodes' hw_expected) are the
    ports opsctl judges ([health] ib_devices) and the ports the alert rules watch (Prometheus labels
    their node_infiniband_* series fabric="infiniband"); Ethernet ports of the same cards are not."""
    cfg = parse_config((rendered / "opsctl.toml").read_text(), rendered / "opsctl.toml")
    assert cfg.section("health", HealthSection).ib_devices == PRODUCTION_FABRIC
    doc = yaml.safe_load((rendered / "prometheus.yml").read_text())
    node = next(j for j in doc["scrape_configs"] if j["job_name"] == "node")
    assert [_fabric(node, d) for d in ("mlx5_0", "mlx5_7", "mlx5_8", "mlx5_10")] == [
        "infiniband", "infiniband", None, None,
    ]  # fmt: skip
    assert _fabric(node, "mlx5_0", "node_filesystem_avail_bytes") is None  # only the IB families


def test_a_site_with_ethernet_ports_beside_its_fabric_lists_only_the_fabric(tmp_path):
    h100 = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    out = render(tmp_path / "out", tmp_path, "-e", json.dumps({"ib_fabric_hcas": h100}))
    cfg = parse_config((out / "opsctl.toml").read_text(), out / "opsctl.toml")
    assert cfg.section("health", HealthSection).ib_devices == h100
    doc = yaml.safe_load((out / "prometheus.yml").read_text())
    node = next(j for j in doc["scrape_configs"] if j["job_name"] == "node")
    labelled = {f"mlx5_{i}" for i in range(12) if _fabric(node, f"mlx5_{i}") == "infiniband"}
    assert labelled == set(h100)
    assert _fabric(node, "mlx5_1") is None and _fabric(node, "mlx5_100") is None
