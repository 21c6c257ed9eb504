"""The rich console every human-readable table goes through.

What opsctl prints comes from Slurm (drain reasons, the user who set them), exporters, logs and
operators, so it is printed as given: rich's markup would swallow "[root]" and its emoji codes
would turn "opsctl:watch:..." into a clock. Colour comes from styles on Text, never from markup.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console


def plain_console(**kwargs: Any) -> Console:
    return Console(markup=False, emoji=False, **kwargs)


def listing_console() -> Console:
    """For the row-per-node listings (`nodes`, `quarantine list`): piped into grep or a ticket, a
    row must not be cut to an 80-column default, so output that is not a terminal is 240 wide."""
    return plain_console(soft_wrap=True, width=None if sys.stdout.isatty() else 240)
