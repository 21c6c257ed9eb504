"""`pip install opsctl` is the on-call, launch and provisioning tool only: the training job's stack
(torch, transformers, tokenizers, safetensors) comes with the `training` extra, and the commands a
head or login node runs work where that stack is absent."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
TRAINING_STACK = ("torch", "transformers", "tokenizers", "safetensors")
# a meta path finder that makes the training stack absent, as in a venv with `pip install opsctl`
_ABSENT = f"""
import sys
class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TRAINING_STACK!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (lean install)", name=name)
        return None
sys.meta_path.insert(0, _Absent())
"""


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_training_stack_is_an_extra_not_a_dependency() -> None:
    project = _project()
    base = {Requirement(r).name for r in project["dependencies"]}
    training = {Requirement(r).name for r in project["optional-dependencies"]["training"]}
    assert not base & set(TRAINING_STACK)
    assert set(TRAINING_STACK) <= training


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _ABSENT + code], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_on_call_and_launch_commands_work_without_the_training_stack() -> None:
    commands = [
        ["--help"],
        ["nodes", "--help"],
        ["drain", "--help"],
        ["resume", "--help"],
        ["health", "--help"],
        ["remediator", "--help"],
        ["watch", "--help"],
        ["launch", "rl-run", "--help"],
        ["preflight", "--help"],
        ["quarantine", "--help"],
    ]
    code = (
        "from opsctl.cli import cli\n"
        f"for args in {commands!r}:\n"
        "    try:\n"
        "        cli.main(args=args, prog_name='opsctl', standalone_mode=False)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), (args, exc.code)\n"
        "print('all ran')\n"
    )
    done = _run(code)
    assert done.returncode == 0 and done.stdout.endswith("all ran\n"), done.stderr[-2000:]


def test_a_launch_resolves_and_its_modules_load_without_the_training_stack(tmp_path: Path) -> None:
    # what submitting a run needs on a login node: the job's config, the run directory, the sbatch
    # side; the processes themselves (trainer, inference) run in the training runtime
    run = tmp_path / "run"
    code = (
        "import opsctl.launch.slurm, opsctl.launch.resize, opsctl.watch\n"
        "from opsctl.cli import cli\n"
        f"args = ['launch', 'rl-run', '--local', '--dry-run', '--output', {str(run)!r}]\n"
        "cli.main(args=args, prog_name='opsctl', standalone_mode=False)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"# run directory: {run}") and "[trainer]" in done.stdout


def test_the_blocker_really_blocks() -> None:
    done = _run("import torch")
    assert done.returncode != 0 and "lean install" in done.stderr
