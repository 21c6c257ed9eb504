"""The node lifecycle and the secrets on real machines: a check-mode run of site.yml, the munge key
(text, or a binary key the hosts share) and the database password kept when the playbook runs from
a second controller home directory, a
rotated database password applied to MariaDB, a Slurm upgrade's database dump and refusals, and a
rolling update of a pinned (simulated driver) package, which site.yml refuses on machines in service,
on two GPU machines - drain, wait for the running job, install, a real reboot, validation,
resume - while a job keeps running on the third; a node whose diagnostic fails stays drained and
stops the rollout; once healed a rerun resumes it without a second reboot, and a last run changes
nothing.

The lab cannot build md arrays, XFS, NFS or Lustre (its group_vars say so); those steps are the
golden tests' (tests/unit/ansible/test_golden_storage.py) and real hardware's.

The shared lab (conftest.py), and this module last but one among the lab modules: the rolling
update reboots machines and leaves them on another driver package."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import Converged, RunningLab, explain, playbook, wait_for

from opsctl.lab.packages import LOCAL_SOURCES_FILE, build_sim_package, write_repo_index

pytestmark = [pytest.mark.integration, pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(3000)]

UPDATED = ["gpu-001", "gpu-002"]
BUSY = "gpu-003"  # runs a job through the whole rollout and is never touched
PACKAGE = "opsctl-labsim-driver"
REASON = "opsctl:manual:rolling update labsim driver 1.1-1"
HERE = Path(__file__).resolve().parent


def out(lab: RunningLab, node: str, *cmd: str) -> str:
    proc = lab.ssh(node, *cmd)
    assert proc.returncode == 0, f"{node}: {' '.join(cmd)}: {proc.stderr}"
    return proc.stdout


def secrets_on_hosts(lab: RunningLab) -> dict[str, str]:
    """sha256 of the munge key on every machine and of slurmdbd.conf (with the password) on the head."""
    sums = {
        m.name: out(lab, m.name, "sha256sum", "/etc/munge/munge.key").split()[0] for m in lab.cfg.machines
    }
    sums["slurmdbd.conf"] = out(lab, "head-01", "sha256sum", "/etc/slurm/slurmdbd.conf").split()[0]
    return sums


def nodes(lab: RunningLab) -> dict[str, dict[str, Any]]:
    proc = lab.opsctl_cli("nodes", "--json")
    return {n["name"]: n for n in json.loads(proc.stdout)}


def boot_id(lab: RunningLab, node: str) -> str:
    return out(lab, node, "cat", "/proc/sys/kernel/random/boot_id").strip()


def health_boot(lab: RunningLab, node: str) -> tuple[str, str]:
    """(boot id, its kind) as `opsctl health --source prometheus` reads them for NODE: the role's
    opsctl-boot-id unit, its textfile, node_exporter and Prometheus on the way."""
    env = dict(lab.env, OPSCTL_CONFIG=str(lab.cfg.state_dir / "opsctl.toml"))
    proc = subprocess.run(
        [sys.executable, "-m", "opsctl", "health", node, "--source", "prometheus", "--json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.stdout.strip(), proc.stderr  # exit 1 is fine here: gpu-001 had an XID in the window
    (entry,) = json.loads(proc.stdout)["nodes"]
    return str(entry["boot_id"]), str(entry["boot_kind"])


def installed(lab: RunningLab, node: str) -> str:
    return out(lab, node, "dpkg-query", "--show", "--showformat=${Version} ${db:Status-Want}", PACKAGE)


def job_state(lab: RunningLab, job: str) -> str:
    text = out(lab, "head-01", "scontrol", "show", "job", job)
    m = re.search(r"JobState=(\S+)", text)
    assert m, text
    return m.group(1)


def test_site_converges_with_slurmdbd_and_says_what_the_lab_cannot_build(
    lab: RunningLab, converged: Converged
) -> None:
    first, second = converged.first, converged.second
    assert not first.failed_hosts, explain(lab, first)
    assert not second.changed_hosts, explain(lab, second)
    text = first.output
    assert "skipped: no md RAID or XFS here (nvme_raid_available=false), /scratch is a directory" in text
    assert "/srv/nfs is a directory on the root file system" in text
    assert "skipped: no NFS in this kernel (nfs_kernel_mounts=false)" in text
    assert "skipped: no Lustre in this kernel (lustre_kernel_mounts=false)" in text
    assert "opslab" in out(lab, "head-01", "sacctmgr", "--noheader", "list", "cluster", "format=cluster")
    # slurmd asserts its mounts instead of requiring them (a remount leaves it running); the lab's
    # /scratch is a directory, so there is none here (the storage goldens show production's)
    dropin = out(lab, "gpu-001", "systemctl", "show", "--property=RequiresMountsFor", "slurmd")
    assert dropin.strip() == "RequiresMountsFor="
    # slurmctld took the settings a GPU node's teardown and RDMA need (roles/slurm/defaults)
    config = out(lab, "head-01", "scontrol", "show", "config").splitlines()
    shown = {k.strip(): v.strip() for k, eq, v in (line.partition("=") for line in config) if eq}
    assert shown["UnkillableStepTimeout"] == "180 sec" and shown["PropagateResourceLimitsExcept"] == "MEMLOCK"


def test_the_guides_check_mode_run_reports_no_change_and_no_failure(
    lab: RunningLab, converged: Converged
) -> None:
    # docs/getting-started.md, step 6: `site.yml --check` right after the first converge
    result = converged.check
    assert "--check" in result.output.splitlines()[0], result.output[:200]
    assert result.returncode == 0 and result.recap, explain(lab, result)
    assert not result.failed_hosts and not result.changed_hosts, explain(lab, result)


@pytest.fixture
def second_home() -> Iterator[Path]:
    # Short: ssh's control sockets live under $HOME/.ansible/cp and a socket path has ~100 bytes.
    home = Path(tempfile.mkdtemp(prefix="opsctl-home2-", dir="/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_a_second_controller_home_keeps_the_munge_key_and_database_password(
    lab: RunningLab, converged: Converged, second_home: Path
) -> None:
    before = secrets_on_hosts(lab)
    home = second_home
    # What a controller in another home directory has: none of the lab's secrets (the roles' old
    # default put them under ~/.opsctl/secrets/<cluster>).
    fresh = home / ".opsctl" / "secrets" / "opslab"
    env = {"HOME": str(home)}
    run = playbook(lab, "playbooks/slurm.yml", "-e", f"secrets_dir={fresh}", env=env)
    assert not run.failed_hosts, explain(lab, run)
    assert secrets_on_hosts(lab) == before
    kept = lab.cfg.state_dir / "secrets"
    for name in ("munge.key", "slurmdbd_db_password"):
        assert (fresh / name).read_bytes() == (kept / name).read_bytes(), name
    # What changed, changed on the controller alone (the recovered secrets): no host saw a change.
    # (One run, not a second one to show it: a controller that holds the secrets is the path every
    # other lab run takes, the idempotence run included.)
    changed = [line for line in run.output.splitlines() if line.startswith("changed: [")]
    assert changed and all(" -> localhost]" in line for line in changed), explain(lab, run)
    assert "gpu-001" in out(lab, "head-01", "srun", "-w", "gpu-001", "-N1", "hostname")


def _put_munge_key(lab: RunningLab, key: bytes) -> None:
    """KEY on every machine, munged restarted with it (Slurm's daemons ask munged per message)."""
    b64 = base64.b64encode(key).decode()
    for m in lab.cfg.machines:
        write = f"echo {b64} | base64 -d > /etc/munge/munge.key"
        out(lab, m.name, "sh", "-c", f"{write} && systemctl restart munge")


def test_a_binary_key_the_hosts_share_is_adopted_byte_for_byte(
    lab: RunningLab, converged: Converged, second_home: Path
) -> None:
    """SchedMD's form of the key (1024 random bytes, as `mungekey` writes it) on every host, and a
    controller without the secret: the role keeps that key, byte for byte, and Slurm still talks."""
    original = base64.b64decode(out(lab, "head-01", "base64", "-w0", "/etc/munge/munge.key"))
    site_key = secrets.token_bytes(1024)
    _put_munge_key(lab, site_key)
    try:
        before = secrets_on_hosts(lab)
        fresh = second_home / "secrets"
        run = playbook(lab, str(HERE / "playbooks" / "munge.yml"), "-e", f"secrets_dir={fresh}",
                       env={"HOME": str(second_home)})  # fmt: skip
        assert not run.failed_hosts, explain(lab, run)
        assert (fresh / "munge.key").read_bytes() == site_key
        assert secrets_on_hosts(lab) == before
        changed = [line for line in run.output.splitlines() if line.startswith("changed: [")]
        assert changed and all(" -> localhost]" in line for line in changed), explain(lab, run)
        assert "gpu-002" in out(lab, "head-01", "srun", "-w", "gpu-002", "-N1", "hostname")
    finally:
        _put_munge_key(lab, original)
    assert "gpu-002" in out(lab, "head-01", "srun", "-w", "gpu-002", "-N1", "hostname")


def test_a_changed_database_password_is_applied_to_the_database(
    lab: RunningLab, converged: Converged
) -> None:
    secret = lab.cfg.state_dir / "secrets" / "slurmdbd_db_password"
    new = hashlib.sha256(secret.read_bytes()).hexdigest()[:32]
    secret.write_text(new + "\n")
    run = playbook(lab, "playbooks/slurm.yml", "--limit", "head-01")
    assert not run.failed_hosts, explain(lab, run)
    assert f"StoragePass={new}\n" in out(lab, "head-01", "cat", "/etc/slurm/slurmdbd.conf")
    login = lab.ssh(
        "head-01",
        "sh",
        "-c",
        f"printf '[client]\\nuser=slurm\\npassword={new}\\n' > /tmp/c.cnf;"
        " mysql --defaults-extra-file=/tmp/c.cnf -N -e 'select 1' slurm_acct_db;"
        " rc=$?; rm -f /tmp/c.cnf; exit $rc",
    )
    assert login.returncode == 0 and login.stdout.strip() == "1", login.stderr
    assert "opslab" in out(lab, "head-01", "sacctmgr", "--noheader", "list", "cluster", "format=cluster")


def test_a_slurm_upgrade_dumps_the_database_first_and_refuses_what_slurm_cannot_make(
    lab: RunningLab, converged: Converged
) -> None:
    """roles/slurm/tasks/upgrade.yml against the lab's Slurm 22.05: a pin three releases on is refused
    before anything changes (downgrades too: unit-tested); one supported step (23.02) dumps
    slurm_acct_db before apt moves a package, and apt then finds no 23.02 in the lab's Debian 12
    repository (so nothing is upgraded here: the lab shows the order, not the conversion)."""
    dumps, prefs = "/var/lib/opsctl/slurmdbd-dumps", "/etc/apt/preferences.d/opsctl-slurm"
    pinned = out(lab, "head-01", "cat", prefs)
    run = playbook(lab, "playbooks/slurm.yml", "--limit", "head-01", "-e", "slurm_version=24.05")
    refusal = "22.05 -> 24.05 is wider than one Slurm upgrade: pin 23.11 then 24.05 in turn"
    assert run.failed_hosts and refusal in run.output, run.output[-3000:]
    assert out(lab, "head-01", "cat", prefs) == pinned
    assert lab.ssh("head-01", "test", "-e", dumps).returncode == 1
    try:
        run = playbook(lab, "playbooks/slurm.yml", "--limit", "head-01", "-e", "slurm_version=23.02")
        failed_at = "Install Slurm packages on the accounting host"
        assert run.failed_hosts and failed_at in run.output, run.output[-3000:]
        (dump,) = out(lab, "head-01", "ls", dumps).split()
        assert re.fullmatch(r"slurm_acct_db-22\.05-to-23\.02-\d{8}T\d{6}Z\.sql", dump), dump
        text = out(lab, "head-01", "cat", f"{dumps}/{dump}")
        assert "CREATE DATABASE" in text and "`opslab_job_table`" in text, text[:500]
        assert out(lab, "head-01", "stat", "-c", "%a", dumps).strip() == "700"
        version = out(lab, "head-01", "dpkg-query", "--show", "--showformat=${Version}", "slurmdbd")
        assert version.startswith("22.05."), version
    finally:
        saved = base64.b64encode(pinned.encode()).decode()
        lab.ssh("head-01", "sh", "-c", f"rm -rf {dumps} && echo {saved} | base64 -d > {prefs}")
    assert out(lab, "head-01", "cat", prefs) == pinned


@pytest.fixture
def cancel_jobs(lab: RunningLab) -> Iterator[list[str]]:
    """Job ids a test submits, cancelled when it ends: the lab is shared with the modules after it."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        lab.ssh("head-01", "scancel", *jobs)


def test_a_rolling_update_drains_installs_reboots_validates_and_resumes(
    lab: RunningLab, converged: Converged, cancel_jobs: list[str]
) -> None:
    lab.opsctl("connect")
    # The simulated driver in the lab's own repository, at the version every GPU machine runs now.
    repo = lab.cfg.state_dir / "repo"
    for version in ("1.0-1", "1.1-1"):
        build_sim_package(repo, PACKAGE, version)
    write_repo_index(repo)
    for m in lab.cfg.gpu_machines:
        out(
            lab,
            m.name,
            "sh",
            "-c",
            f"apt-get update -q -o Dir::Etc::sourcelist=sources.list.d/{LOCAL_SOURCES_FILE}"
            " -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 >/dev/null"
            f" && apt-get install -y -q {PACKAGE}=1.0-1 >/dev/null && apt-mark hold {PACKAGE}",
        )
    lab_yml = lab.inventory / "group_vars" / "all" / "lab.yml"
    lab_yml.write_text(
        lab_yml.read_text().replace('labsim_driver_version: "1.0-1"', 'labsim_driver_version: "1.1-1"')
    )
    # site.yml with the new pin stops in its validate play: every GPU machine is in service with the
    # old version, and only the rolling update may move it there
    refused = playbook(lab, "site.yml")
    plays = [line for line in refused.output.splitlines() if line.startswith("PLAY [")]
    assert refused.returncode != 0, explain(lab, refused)
    assert plays and all(p.startswith("PLAY [Validate") for p in plays), plays
    for m in lab.cfg.gpu_machines:
        assert f"{m.name} is in service (idle) and runs {PACKAGE} 1.0-1 (pinned 1.1-1)" in refused.output, (
            refused.output[-4000:]
        )
        assert installed(lab, m.name) == "1.0-1 hold"
    long_job = out(lab, "head-01", "sbatch", "--parsable", "-w", BUSY, "-N1", "--wrap", "sleep 3000").strip()
    short_job = out(
        lab, "head-01", "sbatch", "--parsable", "-w", "gpu-001", "-N1", "--wrap", "sleep 25"
    ).strip()
    cancel_jobs += [long_job, short_job]
    boots = {m.name: boot_id(lab, m.name) for m in lab.cfg.gpu_machines}
    # the proof of reboot opsctl relies on: the kernel's boot id, written at boot by the node_exporter role
    assert out(lab, "gpu-001", "systemctl", "is-enabled", "opsctl-boot-id").strip() == "enabled"
    assert health_boot(lab, "gpu-001") == (boots["gpu-001"], "kernel")
    # gpu-002's diagnostic will fail after its reboot: a failed row remap is damage a reboot keeps
    # (an ECC error alone clears with the boot, labsim's boot unit)
    lab.opsctl("inject", "gpu-002", "row_remap_failure")
    audit_file = lab.cfg.state_dir / "audit.jsonl"
    audited_before = len(audit_file.read_text().splitlines()) if audit_file.exists() else 0
    first = playbook(lab, "playbooks/rolling-update.yml", "--limit", ",".join(UPDATED))
    assert first.returncode != 0 and first.failed_hosts == ["gpu-002"], explain(lab, first)
    assert "dcgmi diag -r 1 failed: software (GPU 0)" in first.output
    state = nodes(lab)
    # gpu-001: waited for its job, took the new version, really rebooted, validated and resumed
    assert job_state(lab, short_job) == "COMPLETED"
    assert installed(lab, "gpu-001") == "1.1-1 hold"
    assert boot_id(lab, "gpu-001") != boots["gpu-001"]
    rebooted_001 = boot_id(lab, "gpu-001")
    wait_for("Prometheus to serve gpu-001's new kernel boot id",
             lambda: health_boot(lab, "gpu-001") == (rebooted_001, "kernel"))
    assert "DRAIN" not in state["gpu-001"]["flags"] and state["gpu-001"]["state"] == "idle"
    # gpu-002: updated and rebooted, but its diagnostic failed: it stays drained, with the update's reason
    assert installed(lab, "gpu-002") == "1.1-1 hold"
    rebooted_002 = boot_id(lab, "gpu-002")
    assert rebooted_002 != boots["gpu-002"]
    assert "DRAIN" in state["gpu-002"]["flags"] and state["gpu-002"]["reason"] == REASON
    # gpu-003 ran its job the whole time and was never drained or rebooted
    assert job_state(lab, long_job) == "RUNNING"
    assert boot_id(lab, BUSY) == boots[BUSY] and installed(lab, BUSY) == "1.0-1 hold"
    audit = [json.loads(line) for line in audit_file.read_text().splitlines()[audited_before:]]
    assert [(r["action"], r["nodes"]) for r in audit if r["result"] == "applied"] == [
        ("drain", ["gpu-001"]),
        ("resume", ["gpu-001"]),
        ("drain", ["gpu-002"]),
    ]

    lab.opsctl("heal", "gpu-002")
    second = playbook(lab, "playbooks/rolling-update.yml", "--limit", ",".join(UPDATED))
    assert not second.failed_hosts, explain(lab, second)
    assert second.recap["gpu-001"].changed == 0
    assert boot_id(lab, "gpu-002") == rebooted_002, "the update was already booted into: no second reboot"
    assert "DRAIN" not in nodes(lab)["gpu-002"]["flags"]

    third = playbook(lab, "playbooks/rolling-update.yml", "--limit", ",".join(UPDATED))
    assert not third.failed_hosts and not third.changed_hosts, explain(lab, third)
    assert job_state(lab, long_job) == "RUNNING"
