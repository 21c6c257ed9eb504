"""docs/getting-started.md's last steps on the lab: shadow mode, then apply.

The shared fixtures run the guide's validate and converge steps (conftest.py) and test_lab_fabric
its acceptance step. The lab's own inventory leaves the `remediation` group empty, so that no other
module shares the lab with a remediation service; this module uses a copy of it as a site would
have it after step 2: head-01 in `remediation`, `opsctl_remediation_config` with `shadow: true`,
and the lean wheelhouse of step 1 (`lab up --runtime` builds it from this checkout). The role runs
through `playbooks/monitoring.yml`, the part of step 6's converge that installs it. Then the
shadow step's commands must pass on the head, its shadow decisions must include no drain of the
healthy lab, and the apply step must turn the service to apply mode. At the end the service is
stopped, any node it drained is resumed and Prometheus's configuration restored, as the module
found them. It runs before every other lab module (tests/conftest.py): a service with fresh state
rightly drains a node whose XID the lab healed without a reboot within the last hour.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_helpers import Converged, RunningLab, explain, playbook, run_guide_step, wait_for

from opsctl.lab import runtime

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(1500)]

SERVICE = "opsctl-remediation"
DECISIONS = "/var/log/opsctl/health-decisions.jsonl"  # roles/opsctl_remediation: the decision log


def write_remediation_vars(inventory: Path, lab: RunningLab, *, shadow: bool) -> None:
    """group_vars/remediation.yml as the guide's step 2 (shadow) and step 10 (its removal) leave it."""
    health: dict[str, Any] = {"shadow": True} if shadow else {}
    data = {
        "opsctl_remediation_wheelhouse": str(runtime.opsctl_wheelhouse_dir(lab.cfg)),
        "opsctl_remediation_config": {"health": health},
    }
    (inventory / "group_vars" / "remediation.yml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def site(lab: RunningLab, converged: Converged, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    assert not converged.first.failed_hosts, explain(lab, converged.first)
    inventory = tmp_path_factory.mktemp("site") / "inventory"
    shutil.copytree(lab.inventory, inventory)
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts["all"]["children"]["remediation"] = {"children": {"head": None}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    write_remediation_vars(inventory, lab, shadow=True)
    try:
        yield inventory
    finally:
        head = lab.cfg.head.name
        lab.ssh(head, "systemctl", "disable", "--now", SERVICE)
        # a failed assertion below must not leave later modules a lab with nodes out of service
        drained = {d["node"] for d in decisions(lab) if d.get("action") == "drain" and d["mode"] == "apply"}
        for node in sorted(drained):
            lab.ssh(head, "scontrol", "update", f"nodename={node}", "state=resume")
        restored = playbook(lab, "playbooks/monitoring.yml", "--limit", head)
        assert restored.returncode == 0, restored.report()


def head_run(lab: RunningLab, *command: str) -> str:
    proc = lab.ssh(lab.cfg.head.name, *command)
    assert proc.returncode == 0, f"{' '.join(command)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def decisions(lab: RunningLab) -> list[dict[str, Any]]:
    text = head_run(lab, "sh", "-c", f"cat {DECISIONS} 2>/dev/null || true")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def status_mode(lab: RunningLab) -> str | None:
    """The mode of the service's last pass, once `remediator status` exits 0 (a recent pass)."""
    proc = lab.ssh(lab.cfg.head.name, "/opt/opsctl/venv/bin/opsctl", "remediator", "status", "--json")
    if proc.returncode != 0:
        return None
    last = json.loads(proc.stdout).get("last_pass") or {}
    return last.get("mode")


def test_the_role_installs_the_service_in_shadow_mode_and_the_shadow_step_passes(
    lab: RunningLab, site: Path
) -> None:
    env = {"ANSIBLE_INVENTORY": str(site)}
    converge = playbook(lab, "playbooks/monitoring.yml", inventory=site)
    assert converge.returncode == 0 and not converge.failed_hosts, converge.report()
    assert wait_for("the service's first pass", lambda: status_mode(lab), timeout=180) == "shadow"

    steps = run_guide_step(lab, "shadow", env=env, opsctl_on=lab.cfg.head.name)
    assert [s.returncode for s in steps] == [0, 0], "\n".join(s.output for s in steps)
    assert "mode shadow" in steps[0].output
    # the review the guide asks for: nothing the service would have done on the healthy lab
    seen = decisions(lab)  # a node left alone with no verdict to report is not logged
    assert {d["mode"] for d in seen} <= {"shadow"}
    acted = [d for d in seen if d.get("action") in ("drain", "resume", "reboot", "hold")]
    assert not acted, acted


def test_the_apply_step_turns_the_service_to_apply_mode(lab: RunningLab, site: Path) -> None:
    write_remediation_vars(site, lab, shadow=False)
    env = {"ANSIBLE_INVENTORY": str(site)}
    steps = run_guide_step(lab, "apply", env=env, opsctl_on=lab.cfg.head.name)
    assert [s.returncode for s in steps] == [0, 0], "\n".join(s.output for s in steps)
    assert "shadow = true" not in head_run(lab, "cat", "/etc/opsctl/opsctl.toml")
    # `status` then shows mode apply: the restarted service's first pass
    assert wait_for("a pass in apply mode", lambda: status_mode(lab) == "apply" or None, timeout=180)
    acted = [d for d in decisions(lab) if d.get("action") in ("drain", "resume", "reboot", "hold")]
    assert not acted, acted
