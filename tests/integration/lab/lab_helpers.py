"""Helpers shared by the lab integration tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from opsctl.lab.config import LabConfig
from opsctl.lab.converge import ConvergeResult, parse_recap

GPU_NODES = ["gpu-001", "gpu-002", "gpu-003"]  # the shared lab's GPU machines (conftest.py)
HEAD_VENV = "/opt/opsctl/venv"  # roles/opsctl_remediation: opsctl_remediation_venv
T = TypeVar("T")


@dataclass
class RunningLab:
    cfg: LabConfig
    inventory: Path
    env: dict[str, str]

    def opsctl(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", "lab", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"opsctl lab {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def opsctl_cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`opsctl ARGS` on the host against the lab (after `lab connect`); AssertionError on failure."""
        env = dict(self.env, OPSCTL_CONFIG=str(self.cfg.state_dir / "opsctl.toml"))
        proc = subprocess.run(
            [sys.executable, "-m", "opsctl", *args], env=env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"opsctl {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def ssh(self, node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        from opsctl.lab.ssh import ssh

        return ssh(self.cfg, self.cfg.machine(node), list(command), check=False, timeout=timeout)


@dataclass
class Converged:
    """site.yml on the fresh lab, as docs/getting-started.md's converge step runs it (a run, then a
    check-mode run), and a second real run (idempotence)."""

    first: ConvergeResult
    check: ConvergeResult
    second: ConvergeResult


GUIDE = Path(__file__).resolve().parents[3] / "docs" / "getting-started.md"
_STEP = re.compile(r"^<!-- step: (?P<name>[a-z-]+) -->\s*$")


def guide_steps(path: Path = GUIDE) -> dict[str, list[str]]:
    """step name -> the command lines of the fenced block right after its `<!-- step: NAME -->`
    marker in the getting-started guide (backslash continuations joined)."""
    steps: dict[str, list[str]] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = _STEP.match(line)
        if not m:
            continue
        assert lines[i + 1].startswith("```"), f"{path}:{i + 1}: a step marker must precede a fence"
        body: list[str] = []
        for code in lines[i + 2 :]:
            if code.startswith("```"):
                break
            body.append(code)
        text = "\n".join(body).replace("\\\n", " ")
        steps[m.group("name")] = [c.strip() for c in text.splitlines() if c.strip()]
    return steps


def run_guide_step(
    lab: RunningLab,
    name: str,
    *,
    env: dict[str, str] | None = None,
    opsctl_on: str | None = None,
    timeout: float = 1800,
) -> list[ConvergeResult]:
    """Run one step of the guide on the lab, its lines in order, as an operator would from the
    repository root: the lab's inventory in ANSIBLE_INVENTORY (the guide's step 2 on the lab), the
    lab's opsctl.toml in OPSCTL_CONFIG once `lab connect` wrote it, the venv's opsctl and
    ansible-playbook first on PATH; ENV overrides. With OPSCTL_ON (a machine), `opsctl` lines run
    there as root, with the opsctl_remediation role's virtualenv first on PATH: the guide's head
    node, where the lab's Ansible controller is this host. Stops at the first line that fails;
    returns each line's result (a PLAY RECAP when it has one)."""
    from opsctl.lab.lab import REPO_ROOT

    run_env = dict(os.environ)
    run_env.update(lab.env)
    toml = lab.cfg.state_dir / "opsctl.toml"
    if toml.is_file():
        run_env["OPSCTL_CONFIG"] = str(toml)
    run_env.update(
        {
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_INVENTORY": str(lab.inventory),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{Path(sys.executable).parent}:{run_env.get('PATH', '')}",
        }
    )
    run_env.update(env or {})
    results: list[ConvergeResult] = []
    for line in guide_steps()[name]:
        if opsctl_on and line.split()[0] == "opsctl":
            proc = lab.ssh(
                opsctl_on, "bash", "-c", f"export PATH={HEAD_VENV}/bin:$PATH; cd; {line}", timeout=timeout
            )
        else:
            proc = subprocess.run(
                ["bash", "-c", line],
                cwd=REPO_ROOT,
                env=run_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        output = f"$ {line}\n{proc.stdout}{proc.stderr}"
        results.append(ConvergeResult(proc.returncode, parse_recap(output), output))
        if proc.returncode != 0:
            break
    return results


def lab_status(lab: RunningLab) -> dict[str, object]:
    data = json.loads(lab.opsctl("status", "--json", check=False).stdout)
    assert isinstance(data, dict)
    return data


def playbook(
    lab: RunningLab,
    book: str,
    *args: str,
    env: dict[str, str] | None = None,
    inventory: Path | None = None,
    timeout: float = 1800,
) -> ConvergeResult:
    """ansible-playbook -i <lab inventory> BOOK ARGS from the repository root, like `run_playbook`
    but with extra arguments (--check, --limit, -e), environment (another HOME) and inventory (a
    copy of the lab's, changed as a site would change its own)."""
    from opsctl.lab.lab import REPO_ROOT

    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env.update({"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory or lab.inventory),
            book,
            *args,
        ],
        cwd=REPO_ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    return ConvergeResult(proc.returncode, parse_recap(output), output)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120) -> T:
    """Poll until probe() returns something truthy; the deadline only bounds waiting, nothing is timed."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(2)
    raise AssertionError(f"gave up waiting for {what}; last probe: {last!r}")


def explain(lab: RunningLab, result: ConvergeResult) -> str:
    """A failed converge assertion's message: the tasks that changed or failed, then each such
    host's recent Slurm and munge journal (a daemon that died between runs shows up as a change), and
    each failed host's Slurm log files."""
    parts = [result.report()]
    for host in sorted(set(result.changed_hosts) | set(result.failed_hosts)):
        proc = lab.ssh(
            host, "journalctl", "--no-pager", "-n", "40", "-u", "slurmd", "-u", "slurmctld", "-u", "munge"
        )
        parts.append(f"--- {host}: journal of slurmd/slurmctld/munge ---\n{proc.stdout}{proc.stderr}")
    for host in sorted(set(result.failed_hosts)):  # the daemons log why they exited to their files
        proc = lab.ssh(host, "sh", "-c", "tail -n 30 /var/log/slurm/*.log")
        parts.append(f"--- {host}: /var/log/slurm ---\n{proc.stdout}{proc.stderr}")
    return "\n".join(parts)
