"""What every command module needs from the click layer: the --config path and JSON output."""

from __future__ import annotations

import json
from typing import Any

import click


def config_path(ctx: click.Context) -> str | None:
    """The root group's --config, or None for $OPSCTL_CONFIG then /etc/opsctl/opsctl.toml."""
    path = (ctx.find_root().obj or {}).get("config_path")
    return str(path) if path is not None else None


def emit_json(data: Any) -> None:
    """One indented JSON document with sorted keys (nodes, quarantine)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True))
