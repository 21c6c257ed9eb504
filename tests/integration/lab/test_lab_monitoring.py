"""Monitoring on the machine lab as production ships it: the dcgm role's counters file, the
prometheus role's scrape and alerting configuration, the shipped alert rules, and Debian's
Alertmanager on the head (the alertmanager role).

- With the shipped counters file, `opsctl health --source prometheus` finds an injected XID 79
  through the per-XID count (DCGM_EXP_XID_ERRORS_COUNT) and remediation would act on it, and the
  GpuFatalXid alert the rule fires reaches the lab's Alertmanager.
- With a counters file lacking the count (one machine's file edited, its exporter restarted),
  opsctl says that machine's XIDs are known by their last value only and `--remediate` refuses.

The shared lab (conftest.py), and this module first among the lab modules: the Prometheus source
keeps an XID on record for its XID window (an hour), so the healthy machine checked here must have
had none, and the faults go to gpu-003 alone (the launch test that follows uses the other two).
Every wait polls against a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import GPU_NODES, Converged, RunningLab, wait_for

from opsctl.hwsim.metrics import XID_COUNT
from opsctl.lab import labsim

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(1800)]

FAULTY = "gpu-003"  # every fault of this module, so that the others stay without XID history
ALERTMANAGER_PORT = 9093  # roles/alertmanager/defaults/main.yml
PROMETHEUS_PORT = 9090
XID_LAST = "DCGM_FI_DEV_XID_ERRORS"  # the last-XID gauge, in every counters file
COUNT_MODE = "[XID counts over the exporter's window]"  # how the gpu-xid summary names its evidence



def get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)
    except (OSError, ValueError):
        return None


def prom(lab: RunningLab, query: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": query})
    body = get_json(f"http://{lab.cfg.head.address}:{PROMETHEUS_PORT}/api/v1/query?{q}") or {}
    result = body.get("data", {}).get("result", [])
    return result if isinstance(result, list) else []


def alertmanager_alerts(lab: RunningLab) -> list[dict[str, Any]]:
    body = get_json(f"http://{lab.cfg.head.address}:{ALERTMANAGER_PORT}/api/v2/alerts")
    return body if isinstance(body, list) else []


@pytest.fixture(scope="module")
def site(lab: RunningLab, converged: Converged) -> Iterator[Path]:
    """site.yml converged, and the host's opsctl pointed at the lab; yields its opsctl.toml."""
    first = converged.first
    assert first.failed_hosts == [] and first.returncode == 0, first.report()
    # the Alertmanager play matched the head (it used to match nothing, with only a warning)
    assert "Could not match supplied host pattern, ignoring: alertmanager" not in first.output
    lab.opsctl("connect")

    def idle() -> bool:  # a drain decision needs nodes in service
        out = lab.ssh("head-01", "sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
        return dict(zip(out[::2], out[1::2], strict=True)) == dict.fromkeys(GPU_NODES, "idle")

    wait_for("every GPU machine idle in Slurm", idle)
    yield lab.cfg.state_dir / "opsctl.toml"


def health(lab: RunningLab, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opsctl", "--config", str(config), "health", "--source", "prometheus", *args],
        env=lab.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def xid_verdicts(doc: dict[str, Any], node: str) -> list[dict[str, Any]]:
    (entry,) = [n for n in doc["nodes"] if n["node"] == node]
    return [v for v in entry["verdicts"] if v["code"] == "gpu-xid"]


def coverage(lab: RunningLab, config: Path) -> dict[str, Any]:
    proc = health(lab, config, "--coverage", "--json")
    assert proc.stdout.strip(), proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_xid_79_is_found_through_the_count_and_its_alert_reaches_alertmanager(
    lab: RunningLab, site: Path
) -> None:
    # every GPU machine's exporter serves the shipped counters file, the count among them
    wait_for(
        "the XID count of every GPU machine in Prometheus",
        lambda: {s["metric"].get("Hostname") for s in prom(lab, XID_COUNT)} >= set(GPU_NODES),
        timeout=180,
    )
    assert coverage(lab, site)["xid_modes"] == {"count": GPU_NODES}
    # Prometheus sends its alerts to the head's Alertmanager, which holds none on a healthy lab
    managers = wait_for(
        "Prometheus to discover the Alertmanager",
        lambda: (get_json(f"http://{lab.cfg.head.address}:{PROMETHEUS_PORT}/api/v1/alertmanagers") or {})
        .get("data", {})
        .get("activeAlertmanagers"),
    )
    assert [m["url"] for m in managers] == [f"http://{lab.cfg.head.address}:{ALERTMANAGER_PORT}/api/v2/alerts"]
    assert not [a for a in alertmanager_alerts(lab) if a["labels"]["alertname"] == "GpuFatalXid"]
    # the lab runs no remediation service: its dead-man rules are not installed (they would page)
    rules = get_json(f"http://{lab.cfg.head.address}:{PROMETHEUS_PORT}/api/v1/rules")["data"]["groups"]
    loaded = {r["name"] for g in rules for r in g["rules"]}
    assert "GpuFatalXid" in loaded and not {n for n in loaded if n.startswith("OpsctlRemediator")}

    out = lab.opsctl("inject", FAULTY, "xid=79,gpu=3", "--json")
    assert len(json.loads(out.stdout)["active_faults"]) == 1
    try:
        wait_for(
            f"XID 79 counted for {FAULTY} GPU 3",
            lambda: prom(lab, f'{XID_COUNT}{{Hostname="{FAULTY}",gpu="3",xid="79"}} > 0'),
        )
        def failing() -> subprocess.CompletedProcess[str] | None:
            proc = health(lab, site, "--json")
            return proc if proc.returncode == 1 else None

        proc = wait_for(f"opsctl health to FAIL {FAULTY}", failing, timeout=60)
        doc = json.loads(proc.stdout)
        (fail,) = [v for v in xid_verdicts(doc, FAULTY) if v["status"] != "OK"]
        assert (fail["status"], fail["gpu"]) == ("FAIL", 3), fail
        assert "xid 79" in fail["summary"] and COUNT_MODE in fail["summary"], fail
        assert (fail["evidence"]["mode"], fail["evidence"]["xid"]) == ("count", 79), fail
        assert all(v["status"] == "OK" for v in xid_verdicts(doc, "gpu-002")), doc
        # the healthy machine reads OK on every check, not UNKNOWN (the demo once showed
        # "no dcgm-exporter series" beside the failing node)
        healthy = [v for n in doc["nodes"] if n["node"] == "gpu-002" for v in n["verdicts"]]
        assert healthy and all(v["status"] == "OK" for v in healthy), healthy
        # with the count, remediation has nothing to refuse: it would drain FAULTY (a dry run here)
        dry = health(lab, site, "--remediate", "--dry-run", "--json")
        plan = json.loads(dry.stdout)["remediation"]
        assert plan["refusal"] == "", dry.stdout + dry.stderr
        drains = [(d["node"], d["action"], d["code"]) for d in plan["decisions"] if d["action"] == "drain"]
        assert drains == [(FAULTY, "drain", "gpu-xid")], plan

        def fired() -> list[dict[str, Any]]:
            return [a for a in alertmanager_alerts(lab) if a["labels"]["alertname"] == "GpuFatalXid"]

        (alert,) = wait_for("GpuFatalXid in the lab's Alertmanager", fired, timeout=120)
        labels = alert["labels"]
        assert (labels["Hostname"], labels["gpu"], labels["xid"]) == (FAULTY, "3", "79"), labels
        assert labels["cluster"] == "opslab"  # Prometheus's external label, from the lab inventory
        assert alert["status"]["state"] == "active"
        assert [r["name"] for r in alert["receivers"]] == ["ticket"]  # the role's route for "critical"
    finally:
        lab.opsctl("heal", FAULTY)


def test_without_the_count_opsctl_is_in_last_value_mode_and_remediation_refuses(
    lab: RunningLab, site: Path
) -> None:
    counters, unit = labsim.COLLECTORS, labsim.EXPORTER_UNIT
    saved = f"{counters}.shipped"
    # FAULTY's exporter from here on reads the shipped file without the count row
    edit = lab.ssh(
        FAULTY, "sh", "-ec",
        f"cp -p {counters} {saved}; grep -v '^{XID_COUNT},' {saved} > {counters}; systemctl restart {unit}",
    )
    assert edit.returncode == 0, edit.stderr
    try:
        rows = lab.ssh(FAULTY, "cat", counters).stdout
        assert XID_LAST in rows and XID_COUNT not in rows

        def last_value_only() -> bool:
            count = [s for s in prom(lab, XID_COUNT) if s["metric"].get("Hostname") == FAULTY]
            last = [s for s in prom(lab, XID_LAST) if s["metric"].get("Hostname") == FAULTY]
            return not count and len(last) == 8

        wait_for(f"{FAULTY}'s XID count gone from Prometheus, its last XID kept", last_value_only)
        text = health(lab, site, "--coverage")
        assert "last-value" in text.stdout, text.stdout + text.stderr  # opsctl says how it knows
        cov = coverage(lab, site)
        assert cov["xid_modes"] == {"count": ["gpu-001", "gpu-002"], "last-value": [FAULTY]}, cov
        assert cov["last_value_xids"] is True

        lab.opsctl("inject", FAULTY, "xid=79,gpu=5")
        wait_for(
            f"last XID 79 on {FAULTY} GPU 5",
            lambda: prom(lab, f'{XID_LAST}{{Hostname="{FAULTY}",gpu="5"}} == 79'),
        )
        refused = health(lab, site, "--remediate")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.startswith("opsctl: error: remediation refused: "), refused.stderr
        assert FAULTY in refused.stderr and "known only by their last value" in refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        # nothing drained in the lab's slurmctld
        reasons = lab.ssh("head-01", "sinfo", "-h", "-N", "-R", "-o", "%N|%E")
        assert reasons.returncode == 0 and "opsctl" not in reasons.stdout, reasons.stdout
    finally:
        lab.opsctl("heal", FAULTY)
        lab.ssh(FAULTY, "sh", "-ec", f"mv {saved} {counters}; systemctl restart {unit}")
    wait_for(
        f"{FAULTY}'s XID count back in Prometheus",
        lambda: [s for s in prom(lab, XID_COUNT) if s["metric"].get("Hostname") == FAULTY],
    )


def test_auto_reboot_reboots_the_xid_79_machine_through_slurm_and_it_returns_to_service(
    lab: RunningLab, site: Path, tmp_path: Path
) -> None:
    """[health] auto_reboot on the lab: FAULTY's XID 79 drains it through `opsctl health
    --remediate`; idle, the next pass asks slurmctld to reboot it; slurmd runs the slurm role's
    RebootProgram (/usr/sbin/reboot: the machine really reboots), slurmctld resumes the node once
    its slurmd is back from the new boot (nextstate=RESUME), and opsctl sees the new kernel boot id
    through Prometheus. The XIDs counted before the reboot are the earlier boot's from then on."""
    config = tmp_path / "opsctl.toml"
    text = site.read_text()
    assert "\n[health]\n" in text
    config.write_text(
        text.replace("\n[health]\n", "\n[health]\nauto_reboot = true\n", 1).replace(
            str(lab.cfg.state_dir / "health-state.json"), str(tmp_path / "state.json")
        )
    )
    before = boot_id(lab, FAULTY)

    def remediate() -> dict[str, Any]:
        proc = health(lab, config, "--remediate", "--json")
        assert proc.stdout.strip(), proc.stderr
        plan: dict[str, Any] = json.loads(proc.stdout)["remediation"]
        assert plan["refusal"] == "", plan
        return plan

    def acting(action: str) -> list[dict[str, Any]] | None:
        return [d for d in remediate()["decisions"] if d["action"] == action] or None

    lab.opsctl("inject", FAULTY, "xid=79,gpu=3")
    try:
        wait_for(
            f"XID 79 counted for {FAULTY} GPU 3",
            lambda: prom(lab, f'{XID_COUNT}{{Hostname="{FAULTY}",gpu="3",xid="79"}} > 0'),
        )
        drained = wait_for(f"{FAULTY} drained", lambda: acting("drain"), timeout=60)
        assert [(d["node"], d["result"], d["latch"]["action"]) for d in drained] == [
            (FAULTY, "applied", "reboot")
        ], drained
        assert slurm_reasons(lab) == {FAULTY: drained[0]["reason"]}
        # idle and drained by opsctl: the next pass asks Slurm for the reboot, with the drain's reason
        (reboot,) = acting("reboot") or []
        reason = drained[0]["reason"]
        assert (reboot["node"], reboot["result"], reboot["reason"]) == (FAULTY, "applied", reason)
        after = wait_for(
            f"{FAULTY} to reboot", lambda: (b := boot_id_or_none(lab, FAULTY)) != before and b, timeout=300
        )
        # slurmctld saw the new boot and put the node back, without anyone resuming it
        wait_for(f"Slurm to return {FAULTY} to service", lambda: slurm_state(lab, FAULTY) == "idle",
                 timeout=300)
        assert slurm_reasons(lab) == {}

        def proven() -> list[dict[str, Any]] | None:
            decisions = remediate()["decisions"]
            return [d for d in decisions if d["node"] == FAULTY and "through Slurm" in d["why"]] or None

        (back,) = wait_for("opsctl to see the new boot", proven, timeout=180)
        assert "boot id changed" in back["why"] and back["action"] == "none", back
        assert FAULTY not in json.loads((tmp_path / "state.json").read_text())["latches"]
        # the XID is the earlier boot's: the machine reads OK and stays in service
        doc = json.loads(health(lab, config, "--json").stdout)
        (entry,) = [n for n in doc["nodes"] if n["node"] == FAULTY]
        assert entry["boot_id"] == after and entry["status"] == "OK", entry
        assert [d["action"] for d in remediate()["decisions"] if d["node"] == FAULTY] == ["none"]
    finally:
        lab.opsctl("heal", FAULTY)


def boot_id_or_none(lab: RunningLab, node: str) -> str | None:
    """The machine's kernel boot id, None while it is rebooting (ssh fails)."""
    proc = lab.ssh(node, "cat", "/proc/sys/kernel/random/boot_id", timeout=20)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def boot_id(lab: RunningLab, node: str) -> str:
    found = boot_id_or_none(lab, node)
    assert found, f"{node}: no boot id"
    return found


def slurm_state(lab: RunningLab, node: str) -> str:
    return lab.ssh("head-01", "sinfo", "-h", "-N", "-n", node, "-o", "%t").stdout.strip()


def slurm_reasons(lab: RunningLab) -> dict[str, str]:
    out = lab.ssh("head-01", "sinfo", "-h", "-N", "-R", "-o", "%N|%E").stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)
