"""The slurm role's HealthCheckProgram hook (healthcheck.sh), rendered by the real Ansible and run
by a real shell against fake `hostname`, `sinfo` and `scontrol` that keep the node's state and
record every call. The hook owns only the reasons it writes (``hc:<check>: ...``): a node drained
by anyone else (an operator, opsctl's health, manual or watch drains) keeps its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from provisioning_helpers import render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_slurm_healthcheck.yml"
NODE = "gpu-007"

# sinfo: prints "<state>|<reason>" from state.txt for the one query the hook makes; scontrol:
# "update NodeName=... State=DRAIN Reason=..." drains. Both append their argv to calls.jsonl.
FAKE = """#!{python}
import json, os, sys
tool = os.path.basename(sys.argv[0])
base = os.environ["FAKE_SLURM"]
with open(os.path.join(base, "calls.jsonl"), "a") as log:
    log.write(json.dumps([tool, *sys.argv[1:]]) + "\\n")
state_file = os.path.join(base, "state.txt")
if tool == "hostname":
    print("{node}")
elif tool == "sinfo":
    if os.path.exists(os.path.join(base, "sinfo-fails")):
        print("sinfo: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
        sys.exit(1)
    # the one query the hook makes: this node's base state and reason, one line per partition
    assert sys.argv[1:] == ["--noheader", "--Node", "--nodes={node}", "--format=%T|%E"], sys.argv
    print(open(state_file).read().strip())
elif tool == "scontrol":
    args = dict(a.split("=", 1) for a in sys.argv[2:])
    assert sys.argv[1] == "update" and args["NodeName"] == "{node}" and args["State"] == "DRAIN", sys.argv
    open(state_file, "w").write("drained|" + args["Reason"])
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("healthcheck")
    out = tmp / "out"
    out.mkdir()
    render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}", inventory="localhost,")
    return (out / "healthcheck.sh").read_text()


def run_hook(rendered: str, tmp_path: Path, state: str, *, sinfo_fails: bool = False,
             checks: dict[str, str] | None = None) -> tuple[int, list[list[str]], str]:
    """Run the hook on a node whose slurmctld view is STATE ("<sinfo %T>|<sinfo %E>"); returns the
    exit status, the scontrol calls and the state afterwards."""
    fake = tmp_path / "slurm"
    bin_dir = tmp_path / "bin"
    checks_dir = tmp_path / "healthcheck.d"
    for d in (fake, bin_dir, checks_dir):
        d.mkdir()
    (fake / "state.txt").write_text(state + "\n")
    if sinfo_fails:
        (fake / "sinfo-fails").touch()
    for tool in ("hostname", "sinfo", "scontrol"):
        path = bin_dir / tool
        path.write_text(FAKE.format(python=sys.executable, node=NODE))
        path.chmod(0o755)
    checks = checks if checks is not None else {
        "10-mounts": "#!/bin/sh\nexit 0\n",
        "20-gpus": "#!/bin/sh\necho 'GPU 3 missing from nvidia-smi'\necho second line\nexit 1\n",
        "30-never": "#!/bin/sh\necho not reached\nexit 1\n",
    }
    for name, body in checks.items():
        (checks_dir / name).write_text(body)
        (checks_dir / name).chmod(0o755)
    assert "dir=/etc/slurm/healthcheck.d\n" in rendered
    script = tmp_path / "healthcheck.sh"
    script.write_text(rendered.replace("dir=/etc/slurm/healthcheck.d\n", f"dir={checks_dir}\n"))
    proc = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_SLURM": str(fake)})
    calls = [json.loads(line) for line in (fake / "calls.jsonl").read_text().splitlines()]
    updates = [c[1:] for c in calls if c[0] == "scontrol"]
    return proc.returncode, updates, (fake / "state.txt").read_text().strip()


DRAIN = ["update", f"NodeName={NODE}", "State=DRAIN", "Reason=hc:20-gpus: GPU 3 missing from nvidia-smi"]


@pytest.mark.parametrize("state", ["idle|none", "mixed|none", "allocated|none"])
def test_a_failing_check_drains_a_node_in_service_with_its_own_reason(rendered, tmp_path, state) -> None:
    rc, updates, after = run_hook(rendered, tmp_path, state)
    assert rc == 1
    assert updates == [DRAIN]
    assert after == "drained|hc:20-gpus: GPU 3 missing from nvidia-smi"


def test_its_own_earlier_drain_is_updated(rendered, tmp_path) -> None:
    rc, updates, after = run_hook(rendered, tmp_path, "drained|hc:10-mounts: /scratch not mounted")
    assert rc == 1
    assert updates == [DRAIN]
    assert after == "drained|hc:20-gpus: GPU 3 missing from nvidia-smi"


@pytest.mark.parametrize(
    "state",
    [
        "drained|bad PSU",  # an operator's, with scontrol
        "draining|opsctl:health:gpu-xid:xid 79 gpu 5",  # remediation's: it holds a latch on it
        "drained|opsctl:manual:RMA 4711",  # opsctl drain
        "drained|opsctl:watch:launch-node-failed:exit 1 in run r1",
        "down|Not responding",  # slurmctld's own
        "drained|hcx: not the hook's",  # only "hc:" is the hook's
    ],
)
def test_a_drain_by_someone_else_keeps_its_reason(rendered, tmp_path, state) -> None:
    rc, updates, after = run_hook(rendered, tmp_path, state)
    assert rc == 1  # the check still failed
    assert updates == []
    assert after == state


def test_an_unreadable_reason_is_not_overwritten(rendered, tmp_path) -> None:
    rc, updates, after = run_hook(rendered, tmp_path, "drained|bad PSU", sinfo_fails=True)
    assert rc == 1
    assert updates == []
    assert after == "drained|bad PSU"


def test_passing_checks_touch_nothing(rendered, tmp_path) -> None:
    ok = {"10-ok": "#!/bin/sh\nexit 0\n"}
    rc, updates, after = run_hook(rendered, tmp_path, "drained|bad PSU", checks=ok)
    assert (rc, updates, after) == (0, [], "drained|bad PSU")
