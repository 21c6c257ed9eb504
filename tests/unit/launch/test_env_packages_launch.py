"""env.packages at launch (opsctl/launch/environments.py): a wheel or a package directory is
installed offline into a staging directory that becomes the run's environments/; anything wrong is
one line, exit 2, and leaves neither a run directory nor a staging directory behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from launch_unit_helpers import ROOT

from opsctl.cli import main
from opsctl.errors import ConfigError
from opsctl.launch.environments import package_paths, stage
from training.config import load_config

pytest.importorskip("verifiers")  # the training extra: the check loads the environment
PACKAGE = ROOT / "environments" / "vf_arithmetic"
VF = ['env.name="vf:vf-arithmetic"', "env.kwargs={}", "sft.enabled=false"]


@pytest.fixture
def staging_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "staging"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def opsctl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code or 0), capsys.readouterr().err


def test_a_wheel_is_installed_into_the_run_and_the_runtime_is_untouched(tmp_path: Path, staging_root: Path
                                                                        ) -> None:
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    shutil.copytree(PACKAGE, source)  # a build writes its egg-info beside the sources
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
            "--wheel-dir", str(wheels), str(source)]
    built = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("vf_arithmetic-0.1.0-*.whl")
    cfg = load_config(None, [*VF, f'env.packages=["{wheel}"]'])
    staged = stage(cfg, sys.executable)
    assert staged.path is not None and staged.path.parent == staging_root
    run = tmp_path / "run"
    run.mkdir()
    staged.commit(run)
    assert (run / "environments" / "vf_arithmetic.py").is_file() and not list(staging_root.iterdir())
    import site

    # nothing went into the interpreter's (the runtime's) own site-packages
    assert not [p for d in site.getsitepackages() for p in Path(d).glob("vf_arithmetic*")]


def test_a_missing_or_unbuildable_package_fails_the_launch_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, staging_root: Path
) -> None:
    with pytest.raises(ConfigError, match=r"env.packages: .*/nowhere does not exist"):
        package_paths([str(tmp_path / "nowhere")])
    (tmp_path / "plain").mkdir()
    with pytest.raises(ConfigError, match="neither a wheel nor a package directory"):
        package_paths([str(tmp_path / "plain")])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pyproject.toml").write_text("[project\nname = 'x'\n")
    out = tmp_path / "r"
    code, err = opsctl(capsys, "launch", "rl-run", "--local", "--dry-run", "--output", str(out),
                       *(a for o in [*VF, f'env.packages=["{broken}"]'] for a in ("-o", o)))
    assert code == 2 and err.startswith("opsctl: error: env.packages: pip could not install them: ")
    assert len(err.strip().splitlines()) == 1 and not out.exists() and not list(staging_root.iterdir())


def test_a_dry_run_checks_the_environment_and_keeps_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, staging_root: Path
) -> None:
    out = tmp_path / "r"
    code, err = opsctl(capsys, "launch", "rl-run", "--local", "--dry-run", "--output", str(out),
                       *(a for o in [*VF, f'env.packages=["{PACKAGE}"]'] for a in ("-o", o)))
    assert code == 0, err
    assert not list(PACKAGE.glob("*.egg-info")), "the package directory was written"
    assert not out.exists() and not list(staging_root.iterdir())
    code, err = opsctl(capsys, "launch", "rl-run", "--local", "--dry-run", "--output", str(out),
                       *(a for o in [*VF, f'env.packages=["{PACKAGE}"]', "env.kwargs={digits = 0}"]
                         for a in ("-o", o)))
    assert (code, err) == (2, "opsctl: error: env vf:vf-arithmetic: vf-arithmetic: digits must be in 1..6\n")
