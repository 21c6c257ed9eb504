"""`pip install opsctl` into an empty virtualenv, at the lock's versions: the on-call tool without the
training stack. Needs pip's package index (as scripts/bootstrap.sh does); about 20 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
TRAINING_STACK = {"torch", "transformers", "tokenizers", "safetensors", "numpy"}


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{argv}: {done.stderr[-3000:]}"
    return done


def test_pip_install_brings_the_on_call_tool_without_the_training_stack(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--wheel-dir", str(wheels), str(REPO)])  # fmt: skip
    (wheel,) = wheels.glob("opsctl-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    _run([*pip, "install", "-q", "--constraint", str(REPO / "locks" / "cpu.txt"), str(wheel)])
    listed = json.loads(_run([*pip, "list", "--format=json"]).stdout)
    installed = {p["name"].lower() for p in listed}
    assert "opsctl" in installed and not installed & TRAINING_STACK
    for command in ("nodes", "health", "drain", "remediator", "watch"):
        out = _run([str(venv / "bin" / "opsctl"), command, "--help"], cwd=tmp_path)
        assert out.stdout.startswith("Usage: opsctl"), command
    # the training extra is what the training runtime installs: it brings the stack
    report = tmp_path / "report.json"
    _run([*pip, "install", "-q", "--dry-run", "--report", str(report), "--constraint",
          str(REPO / "locks" / "cpu.txt"), f"{wheel}[training]"])  # fmt: skip
    wanted = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert TRAINING_STACK - {"numpy"} <= wanted
