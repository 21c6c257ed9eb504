"""The rich console every human-readable table goes through.

What opsctl prints comes from Slurm (drain reasons, the user who set them), exporters, logs and
operators, so it is printed as given: rich's markup would swallow "[root]" and its emoji codes
would turn "opsctl:watch:..." into a clock. Colour comes from styles on Text, never from markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console


def plain_console(**kwargs: Any) -> Console:
    return Console(markup=False, emoji=False, **kwargs)
