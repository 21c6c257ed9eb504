"""`opsctl config check|reference`: validate the opsctl.toml in use, and write the configuration
reference from the code (opsctl.reference)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from opsctl.cli.common import config_path, emit_json


@click.group("config")
def config() -> None:
    """Check opsctl.toml, or write the configuration reference."""


@config.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Load and validate the opsctl.toml in use (exit 2 naming the bad key, 0 if it loads)."""
    from opsctl.config import find_config, load_config

    path = find_config(config_path(ctx))
    loaded = load_config(config_path(ctx))
    sections = sorted(loaded.sections)
    if as_json:
        emit_json({"path": str(path) if path else None, "sections": {
            name: dataclasses.asdict(loaded.sections[name]) for name in sections}})
        return
    where = str(path) if path else "no opsctl.toml found: defaults"
    click.echo(f"ok: {where} ({', '.join(f'[{s}]' for s in sections) or 'no sections'})")


@config.command("reference")
@click.option("--job", is_flag=True, help="The training job's TOML instead of opsctl.toml.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the Markdown here (default: print it).")
def reference(job: bool, output: Path | None) -> None:
    """Print (or write) every key, type, default and accepted value, taken from the code."""
    from opsctl.reference import job_toml_reference, opsctl_toml_reference

    text = job_toml_reference() if job else opsctl_toml_reference()
    if output is None:
        click.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}")
