import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.cli import main

ROOT = Path(__file__).resolve().parents[3]
DEMO = str(ROOT / "training" / "configs" / "demo.toml")


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_help_does_not_import_torch() -> None:
    code = (
        "import sys; from opsctl.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "try:\n    main(['launch', 'rl-run', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\nprint('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("ok")
    assert "rl-run" in out.stdout


def test_bad_override_is_a_one_line_config_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _out, err = run_cli(
        [
            "launch",
            "rl-run",
            "--local",
            "--job",
            DEMO,
            "-o",
            "trainer.lrr=1",
            "--output",
            str(tmp_path / "r"),
        ],
        capsys,
    )
    assert code == 2
    assert err.strip() == "opsctl: error: trainer.lrr: unknown key"
    assert not (tmp_path / "r").exists()  # nothing half-applied


def test_bad_value_names_the_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _out, err = run_cli(
        [
            "launch",
            "rl-run",
            "--local",
            "--job",
            DEMO,
            "-o",
            "orchestrator.async_level=-2",
            "--output",
            str(tmp_path / "r"),
        ],
        capsys,
    )
    assert code == 2 and "orchestrator.async_level" in err and "Traceback" not in err


def test_dry_run_prints_the_resolved_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _err = run_cli(
        [
            "launch",
            "rl-run",
            "--local",
            "--job",
            DEMO,
            "-o",
            "trainer.lr=1e-4",
            "--output",
            str(tmp_path / "r"),
            "--dry-run",
        ],
        capsys,
    )
    assert code == 0 and "lr = 0.0001" in out
    assert not (tmp_path / "r").exists()


def test_refuses_to_reuse_a_run_dir_and_needs_local(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.toml").write_text("")
    code, _out, err = run_cli(
        ["launch", "rl-run", "--local", "--job", DEMO, "--output", str(tmp_path / "r")], capsys
    )
    assert code == 2 and "already holds a run" in err
    # Without --local the launch goes to Slurm; with no reachable Slurm that is exit 3 (unknown),
    # and the message points at --local.
    code, _out, err = run_cli(["launch", "rl-run", "--job", DEMO], capsys)
    assert code == 3 and "--local" in err
    code, _out, err = run_cli(
        ["launch", "rl-run", "--local", "--resume", "--output", str(tmp_path / "x")], capsys
    )
    assert code == 2 and "not found" in err


def test_the_old_config_spelling_still_names_the_job_with_a_notice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["launch", "rl-run", "--local", "--output", str(tmp_path / "r"), "--dry-run"]
    args += ["-o", "trainer.lr=1e-4"]
    code, out, err = run_cli([*args, "--config", DEMO], capsys)
    assert code == 0 and "lr = 0.0001" in out
    assert err.strip() == (
        "opsctl: notice: `launch rl-run --config FILE` is now `--job FILE`"
        " (`opsctl --config` names opsctl.toml)"
    )
    code, _out, err = run_cli([*args, "--config", DEMO, "--job", DEMO], capsys)
    assert code == 2 and err.strip().startswith("opsctl: error: give the job TOML once: --job")
    assert "--config" not in run_cli(["launch", "rl-run", "--help"], capsys)[1]
