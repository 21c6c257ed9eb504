"""Running site.yml against the lab and reading Ansible's PLAY RECAP."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from opsctl.errors import ConfigError

_RECAP_LINE = re.compile(r"^(?P<host>\S+)\s*:\s*(?P<counts>(?:\w+=\d+\s*)+)$")


@dataclass(frozen=True)
class HostRecap:
    host: str
    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int
    rescued: int
    ignored: int


@dataclass(frozen=True)
class ConvergeResult:
    returncode: int
    recap: dict[str, HostRecap]
    output: str

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.recap.items() if r.failed or r.unreachable)

    @property
    def changed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.recap.items() if r.changed)

    def report(self, tail: int = 3000) -> str:
        """The tasks that changed or failed something (each with its result lines), then the output's
        tail: what a reader of a failed assertion needs, wherever in a long run it happened."""
        notable = notable_tasks(self.output)
        head = "\n".join(notable) if notable else "(no task changed or failed)"
        end = self.output[-tail:] if tail > 0 else ""
        return f"{head}\n--- last {tail} characters ---\n{end}"


_TASK_HEADER = re.compile(r"^(TASK|RUNNING HANDLER) \[(?P<name>.+?)\]")
_NOTABLE_RESULT = re.compile(r"^(changed|failed|fatal|unreachable): ")


def notable_tasks(output: str) -> list[str]:
    """'TASK [name]' followed by its changed/failed/fatal/unreachable lines, for each task that has
    any (ok and skipped ones are left out)."""
    found: list[str] = []
    task, listed = "", False
    for line in output.splitlines():
        m = _TASK_HEADER.match(line)
        if m:
            task, listed = f"{m.group(1)} [{m.group('name')}]", False
            continue
        if _NOTABLE_RESULT.match(line):
            if not listed:
                found.append(task or "(before the first task)")
                listed = True
            found.append("  " + line[:500])
    return found


def parse_recap(output: str) -> dict[str, HostRecap]:
    """Per-host counters from the PLAY RECAP block (the last one, if the output holds several)."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("PLAY RECAP")]
    if not starts:
        return {}
    recap: dict[str, HostRecap] = {}
    for line in lines[starts[-1] + 1 :]:
        m = _RECAP_LINE.match(line.strip())
        if not m:
            if line.strip():
                break
            continue
        counts = {k: int(v) for k, v in (kv.split("=") for kv in m.group("counts").split())}
        recap[m.group("host")] = HostRecap(
            host=m.group("host"),
            **{
                f: counts.get(f, 0)
                for f in ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
            },
        )
    return recap


def _ansible_playbook() -> str:
    # The venv's ansible-core sits next to this interpreter even when the venv is not on PATH.
    beside = Path(sys.executable).parent / "ansible-playbook"
    return str(beside) if beside.exists() else shutil.which("ansible-playbook") or "ansible-playbook"


def run_playbook(
    repo_root: Path, inventory_dir: Path, playbook: str = "site.yml", *, timeout: float = 1800
) -> ConvergeResult:
    """ansible-playbook -i INVENTORY PLAYBOOK from the repository root, with the repo's ansible.cfg."""
    book = repo_root / playbook
    if not book.is_file():
        raise ConfigError(f"{book} not found: the Ansible roles are not in this checkout")
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(repo_root / "ansible.cfg")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env.setdefault("ANSIBLE_NOCOLOR", "1")
    proc = subprocess.run(
        [_ansible_playbook(), "-i", str(inventory_dir), str(book)],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    return ConvergeResult(proc.returncode, parse_recap(output), output)
