"""The CLI entry point stays light: `opsctl --help` must not drag in the ML or query stacks."""

from __future__ import annotations

import subprocess

from imports import modules_after

HEAVY = ["torch", "transformers", "pandas", "prometheus_api_client", "numpy"]


def test_importing_the_cli_imports_nothing_heavy() -> None:
    loaded = modules_after("import opsctl.cli")
    assert not [m for m in HEAVY if m in loaded]


def test_help_of_light_commands_imports_nothing_heavy() -> None:
    code = (
        "from opsctl.cli import cli\n"
        "for args in (['--help'], ['nodes', '--help'], ['drain', '--help'], ['sim', '--help']):\n"
        "    try:\n"
        "        cli.main(args=args, prog_name='opsctl', standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    loaded = modules_after(code)
    assert not [m for m in HEAVY if m in loaded]
    assert "opsctl.cli.nodes" in loaded  # the probe really reached the command modules


def test_help_lists_the_commands(opsctl_bin: str) -> None:
    out = subprocess.run([opsctl_bin, "--help"], capture_output=True, text=True, check=True, timeout=60)
    for name in ("nodes", "drain", "resume", "sim"):
        assert name in out.stdout


def test_bad_config_is_one_line_exit_2(opsctl_bin: str, tmp_path: object) -> None:
    from pathlib import Path

    conf = Path(str(tmp_path)) / "opsctl.toml"
    conf.write_text("[slurm]\nbakend = 'cli'\n")
    out = subprocess.run([opsctl_bin, "--config", str(conf), "nodes"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr.startswith("opsctl: error:") and "slurm.bakend" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
