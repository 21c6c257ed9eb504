"""The training_runtime role rendered by the real Ansible for the production inventory through its
render tasks: the pinned requirements.txt, the lock it installs with, the virtualenv's pip.conf and
the verification script, which is run here with this interpreter's torch and training package.
Bad settings are refused by the role's checks before anything is written."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from provisioning_helpers import GOLDEN, REPO, render_playbook

PLAYBOOK = "tests/unit/ansible/playbooks/render_runtime.yml"
UPDATE = os.environ.get("OPSCTL_UPDATE_GOLDEN") == "1"
FILES = ("pip.conf", "requirements.txt", "verify.py")


def render(out: Path, tmp: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    return render_playbook(PLAYBOOK, tmp, "-e", f"render_dest={out}", *extra, check=check)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("runtime")
    render(tmp / "out", tmp)
    return tmp / "out"


def test_production_runtime_golden(rendered: Path) -> None:
    golden = GOLDEN / "production-runtime"
    if UPDATE:
        golden.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            (golden / name).write_text((rendered / name).read_text())
    for name in FILES:
        assert (rendered / name).read_text() == (golden / name).read_text(), f"{name} differs from {golden}"


def pip_config(conf: Path) -> dict[str, str]:
    """section.key -> value, read as pip reads its configuration files (a RawConfigParser)."""
    parser = configparser.RawConfigParser()
    parser.read(conf)
    return {f"{sec}.{key}": value for sec in parser.sections() for key, value in parser.items(sec)}


def test_the_virtualenv_installs_only_from_the_wheelhouse_on_the_share(rendered: Path) -> None:
    conf = pip_config(rendered / "pip.conf")
    assert conf["global.no-index"] == "true"
    assert conf["global.find-links"] == "/shared/opsctl/wheelhouse"
    assert "global.index-url" not in conf
    assert conf["install.only-binary"] == ":all:"
    lines = [ln for ln in (rendered / "requirements.txt").read_text().splitlines() if ln[:1] != "#"]
    assert lines == ["opsctl[training]==0.1.0", "torch==2.13.0"]


def test_the_runtime_installs_at_the_versions_of_the_cuda_lock(rendered: Path) -> None:
    # the role copies the lock beside requirements.txt and pip installs with --constraint
    assert (rendered / "constraints.txt").read_text() == (REPO / "locks" / "cuda.txt").read_text()
    install = (REPO / "roles" / "training_runtime" / "tasks" / "install.yml").read_text()
    assert "--constraint" in install and "constraints.txt" in install


def test_an_internal_index_replaces_the_wheelhouse_and_the_site_adds_requirements(tmp_path: Path) -> None:
    overrides = {
        "training_runtime_index_url": "https://pypi.example.internal/simple",
        "training_runtime_requirements": {"flash-attn": "==2.8.3", "torch": "==2.13.0"},
    }
    out = tmp_path / "out"
    render(out, tmp_path, "-e", json.dumps(overrides))
    conf = pip_config(out / "pip.conf")
    assert conf["global.no-index"] == "false"
    assert conf["global.index-url"] == "https://pypi.example.internal/simple"
    assert "global.find-links" not in conf
    lines = [ln for ln in (out / "requirements.txt").read_text().splitlines() if ln[:1] != "#"]
    assert lines == ["flash-attn==2.8.3", "opsctl[training]==0.1.0", "torch==2.13.0"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"training_runtime_requirements": {"torch": ">=2.13"}}, "unpinned: torch"),
        ({"training_runtime_requirements": {"opsctl": None}}, "opsctl among the requirements"),
        ({"training_runtime_version": "../elsewhere"}, "a plain directory"),
        ({"training_runtime_root": "/opt/runtime"}, "on the share /shared"),
        ({"training_runtime_wheelhouse_dest": "wheels"}, "absolute training_runtime_wheelhouse_dest"),
        ({"training_runtime_lock": "/nonexistent/lock.txt"}, "the lock (/nonexistent/lock.txt) a file"),
        (
            {"training_runtime_requirements": {"torch": "==2.14.0"}},
            "torch==2.14.0 disagrees with the lock",
        ),
        (
            {"training_runtime_requirements": {"Transformers": "==4.0.0"}},
            "Transformers==4.0.0 disagrees with the lock",
        ),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(
    tmp_path: Path, overrides: dict[str, object], says: str
) -> None:
    out = tmp_path / "out"
    proc = render(out, tmp_path, "-e", json.dumps(overrides), check=False)
    assert proc.returncode != 0
    assert says in " ".join(proc.stdout.split()), proc.stdout[-2000:]
    assert list(out.iterdir()) == []


def test_the_verification_imports_the_project_and_runs_a_tiny_model(rendered: Path) -> None:
    """The very script the role runs before `current` moves, on this interpreter's torch."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(rendered / "verify.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["torch"].startswith("2.13.0") and got["prefix"] == sys.prefix
    assert got["loss"] > 0


def test_storage_yml_builds_the_runtime_after_the_share_is_mounted() -> None:
    import yaml

    plays = yaml.safe_load((REPO / "playbooks" / "storage.yml").read_text())
    hosts = [p["hosts"] for p in plays]
    assert hosts.index("training_runtime") > hosts.index("nfs_clients")
    main = yaml.safe_load((REPO / "roles" / "training_runtime" / "tasks" / "main.yml").read_text())
    # settings and the nodes' own packages everywhere; the runtime once, for all of them
    assert [t.get("run_once") for t in main] == [None, None, True]
    assert main[1]["ansible.builtin.apt"]["name"] == "{{ training_runtime_node_packages }}"
