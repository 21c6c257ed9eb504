"""Exit codes and the exceptions that carry them.

Every command ends with one of these codes; scripts and on-call tooling branch on them.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_UNHEALTHY = 1  # the command worked and found something wrong (unhealthy node, failed run)
EXIT_USAGE = 2  # bad input or bad configuration; nothing was applied
EXIT_UNKNOWN = 3  # the cluster (or a data source) could not be reached; state is unknown


class OpsctlError(Exception):
    """An error that ends a command with a one-line message and a distinct exit code."""

    exit_code = EXIT_UNKNOWN

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(OpsctlError):
    """Bad input from the user: malformed node set, unknown node, empty reason."""

    exit_code = EXIT_USAGE


class ConfigError(OpsctlError):
    """A missing or invalid opsctl.toml (or training config)."""

    exit_code = EXIT_USAGE


class Unreachable(OpsctlError):
    """slurmctld, Prometheus, a node over SSH: could not be reached."""

    exit_code = EXIT_UNKNOWN


class SourceUnreachable(Unreachable):
    """The evidence source could not run at all (Prometheus down): every node's state is unknown."""


class Refused(OpsctlError):
    """A guardrail refused the action (blast radius, operator drain); nothing was changed."""

    exit_code = EXIT_USAGE
