"""Helpers of the provisioning tests: genuine samples, the library modules, real ansible runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import opsctl.parsers.cpuinfo
import opsctl.parsers.hw_facts_build
import opsctl.parsers.ib_sysfs
import opsctl.parsers.lsblk
import opsctl.parsers.meminfo
import opsctl.parsers.nvidia_smi_q
import opsctl.parsers.nvme

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "fixtures"
REAL_WORLD = REPO / "tests" / "fixtures" / "real-world"
GOLDEN = REPO / "tests" / "golden"
BIN = Path(sys.executable).parent

# The modules import the parsers as ansible.module_utils.<name>, which is what Ansible ships to
# a host; in-process tests map those names onto the very same files.
_MODULE_UTILS = {
    "cpuinfo": opsctl.parsers.cpuinfo,
    "hw_facts_build": opsctl.parsers.hw_facts_build,
    "ib_sysfs": opsctl.parsers.ib_sysfs,
    "lsblk": opsctl.parsers.lsblk,
    "meminfo": opsctl.parsers.meminfo,
    "nvidia_smi_q": opsctl.parsers.nvidia_smi_q,
    "nvme": opsctl.parsers.nvme,
}


def load_library_module(name: str) -> ModuleType:
    for util, mod in _MODULE_UTILS.items():
        sys.modules.setdefault(f"ansible.module_utils.{util}", mod)
    spec = importlib.util.spec_from_file_location(f"opsctl_library_{name}", REPO / "library" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_filter_plugin(role: str, name: str) -> ModuleType:
    """roles/<role>/filter_plugins/<name>.py as a module, to test its functions directly."""
    path = REPO / "roles" / role / "filter_plugins" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"opsctl_filter_{role}_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def real(name: str) -> str:
    return (REAL_WORLD / name).read_text(encoding="utf-8")


def ansible_env(tmp_path: Path) -> dict[str, str]:
    """Run the real ansible from the repository root with its ansible.cfg, state kept in tmp_path."""
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def run_ansible(
    tool: str, args: list[str], tmp_path: Path, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(BIN / tool), *args],
        cwd=REPO,
        env={**ansible_env(tmp_path), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def render_playbook(
    playbook: str,
    tmp_path: Path,
    *extra: str,
    inventory: str = "inventory/production",
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run one of tests/unit/ansible/playbooks (a role's render tasks) against INVENTORY with this
    interpreter as Ansible's Python; EXTRA carries the destination (-e render_dest=...) and more."""
    return run_ansible(
        "ansible-playbook",
        ["-i", inventory, playbook, "-e", f"ansible_python_interpreter={sys.executable}", *extra],
        tmp_path,
        check=check,
    )
