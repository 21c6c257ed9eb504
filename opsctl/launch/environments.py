"""A run's verifiers environment, installed and checked where `opsctl launch` runs, before anything
starts or is submitted.

`env.packages` (local package directories or wheels) are installed with the training runtime's own
pip, offline (`--no-index`) and without dependencies, into a staging directory; the runtime itself
is never written (on a cluster it is read-only to jobs). The environment is then loaded from there
and its rubric scores a few reference answers (`python -m training.envs.check`, in the runtime's
interpreter: the head node's opsctl need not have the training stack). Only when both pass does the
staging directory become the run's `environments/`, which the orchestrator puts first on its import
path. A failure is one line naming the environment, exit 2, and leaves nothing behind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.errors import ConfigError

ENV_DIR = "environments"  # training/envs/verifiers_env.py: ENV_DIR
INSTALL_TIMEOUT_S = 600
CHECK_TIMEOUT_S = 300


@dataclass
class StagedEnvironment:
    """Installed packages waiting for the run directory (None: nothing to install)."""

    path: Path | None = None

    def commit(self, run_dir: Path) -> None:
        if self.path is None:
            return
        target = run_dir / ENV_DIR
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(self.path), target)
        self.path = None

    def discard(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def package_paths(packages: list[str]) -> list[Path]:
    """Absolute paths of env.packages, each a wheel or a directory pip can build."""
    out = []
    for p in packages:
        path = Path(p).expanduser().resolve()
        wheel = path.is_file() and path.suffix == ".whl"
        if wheel or any((path / f).is_file() for f in ("pyproject.toml", "setup.py")):
            out.append(path)
        elif path.exists():
            raise ConfigError(f"env.packages: {p} is neither a wheel nor a package directory "
                              "(no pyproject.toml or setup.py)")
        else:
            raise ConfigError(f"env.packages: {p} does not exist")
    return out


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _run(argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ConfigError(f"launch.python {argv[0]!r} not found: it must be the training runtime's "
                          f"interpreter ({what})") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{what} took longer than {timeout:.0f} s") from None


def install(python: str, packages: list[Path], target: Path) -> None:
    """pip builds a directory in place (setuptools writes its egg-info there): each is built from a
    copy, so a package directory may be read-only and is never written."""
    with tempfile.TemporaryDirectory(prefix="opsctl-env-src-") as src:
        sources = [p if p.is_file() else _copy(p, Path(src)) for p in packages]
        argv = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                "--no-deps", "--no-build-isolation", "--target", str(target), *map(str, sources)]
        proc = _run(argv, INSTALL_TIMEOUT_S, "installing env.packages")
    if proc.returncode != 0:
        raise ConfigError(f"env.packages: pip could not install them: {_last_line(proc.stderr)}")


def _copy(package: Path, into: Path) -> Path:
    dest = into / f"{len(list(into.iterdir()))}-{package.name}"
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    return dest


def check(python: str, name: str, kwargs: dict[str, Any], paths: list[Path], examples: int) -> str:
    """The environment's load and scoring check in the runtime's interpreter; its summary line."""
    argv = [python, "-m", "training.envs.check", "--name", name, "--kwargs", json.dumps(kwargs),
            "--examples", str(examples), *(a for p in paths for a in ("--path", str(p)))]
    proc = _run(argv, CHECK_TIMEOUT_S, f"checking env {name}")
    verdict = _last_line(proc.stdout)
    if proc.returncode == 0:
        return verdict
    if verdict.startswith("error: "):
        raise ConfigError(verdict.removeprefix("error: "))
    # the check itself failed (the runtime lacks the training package, say): its last word
    raise ConfigError(f"checking env {name} in {python} failed: {_last_line(proc.stderr)}")


def stage(cfg: Any, python: str) -> StagedEnvironment:
    """Install and check the job's vf: environment; a built-in environment needs nothing."""
    env = cfg.env
    if not env.name.startswith("vf:"):
        return StagedEnvironment()
    packages = package_paths(env.packages)
    staging = Path(tempfile.mkdtemp(prefix="opsctl-env-"))
    try:
        if packages:
            install(python, packages, staging)
        check(python, env.name, env.kwargs, [staging], env.check_examples)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return StagedEnvironment(staging)
