"""The grafana role rendered by the real Ansible for the production inventory, up to Grafana itself
(Debian does not package Grafana): the provisioning files, the dashboards, the admin password
generated once into secrets_dir, and the unit drop-in that hands it to grafana-server."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from provisioning_helpers import GOLDEN, REPO, render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_grafana.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
GOLDEN_FILES = {
    "provisioning/datasources/opsctl.yaml": "grafana-datasource.yaml",
    "provisioning/dashboards/opsctl.yaml": "grafana-dashboards.yaml",
    "grafana-server.service.d/opsctl.conf": "grafana-server-opsctl.conf",
}


def render(out: Path, secrets: Path, tmp: Path, *extra: str, check: bool = True) -> str:
    out.mkdir(parents=True, exist_ok=True)
    proc = render_playbook(
        PLAYBOOK, tmp, "-e", f"render_dest={out}", "-e", f"secrets_dir={secrets}", *extra, check=check
    )
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    tmp = tmp_path_factory.mktemp("grafana")
    out, secrets = tmp / "out", tmp / "secrets"
    log = render(out, secrets, tmp)
    return out, secrets, log


@pytest.mark.parametrize("name", sorted(GOLDEN_FILES))
def test_production_golden(rendered: tuple[Path, Path, str], name: str) -> None:
    out = rendered[0]
    got = (out / name).read_text().replace(str(out), "/RENDER")
    golden = GOLDEN / "production" / GOLDEN_FILES[name]
    if UPDATE:
        golden.write_text(got)
    assert got == golden.read_text(), f"{name} differs from {golden}"


def test_the_datasource_is_the_monitoring_hosts_prometheus(rendered: tuple[Path, Path, str]) -> None:
    doc = yaml.safe_load((rendered[0] / "provisioning/datasources/opsctl.yaml").read_text())
    assert doc["apiVersion"] == 1
    (ds,) = doc["datasources"]
    assert (ds["type"], ds["uid"], ds["url"], ds["access"]) == (
        "prometheus", "prometheus", "http://10.10.0.10:9090", "proxy"
    )  # fmt: skip
    assert ds["isDefault"] is True and ds["jsonData"]["timeInterval"] == "15s"


def test_the_dashboards_are_the_repositorys(rendered: tuple[Path, Path, str]) -> None:
    out = rendered[0]
    provider = yaml.safe_load((out / "provisioning/dashboards/opsctl.yaml").read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"] == str(out / "dashboards")
    shipped = sorted((REPO / "dashboards" / "grafana").glob("*.json"))
    assert sorted(p.name for p in (out / "dashboards").iterdir()) == [p.name for p in shipped]
    for path in shipped:
        assert (out / "dashboards" / path.name).read_bytes() == path.read_bytes()
        dash = json.loads(path.read_text())
        # every panel asks the datasource variable, which offers the provisioned Prometheus
        assert {p["datasource"]["uid"] for p in dash["panels"] if p["type"] != "row"} == {"${datasource}"}


def test_the_admin_password_is_generated_once_and_never_the_default(
    rendered: tuple[Path, Path, str], tmp_path: Path
) -> None:
    out, secrets, _ = rendered
    secret = secrets / "grafana_admin_password"
    password = secret.read_text().strip()
    assert len(password) == 32 and password.isalnum() and password != "admin"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    written = out / "admin_password"
    assert written.read_text() == password and stat.S_IMODE(written.stat().st_mode) == 0o640
    dropin = (out / "grafana-server.service.d/opsctl.conf").read_text()
    assert f"Environment=GF_SECURITY_ADMIN_PASSWORD__FILE={written}\n" in dropin and password not in dropin
    # a second run reads the same secret and changes nothing
    log = render(out, secrets, tmp_path)
    assert written.read_text() == password
    assert "changed=0" in log and "failed=0" in log
    # no password in Ansible's output either
    assert password not in log and password not in rendered[2]


def test_the_role_refuses_to_run_without_grafanas_package(tmp_path: Path) -> None:
    """Debian has no Grafana: without the site's .deb the role stops before changing anything."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- name: Grafana without its package\n  hosts: head-01\n  connection: local\n  gather_facts: false\n"
        "  roles:\n    - role: grafana\n      vars: {grafana_deb_src: '', ansible_become: false}\n"
    )
    proc = render_playbook(str(play), tmp_path, "-e", f"secrets_dir={tmp_path / 'secrets'}", check=False)
    assert proc.returncode != 0
    assert "Debian does not package Grafana" in proc.stdout
