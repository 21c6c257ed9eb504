"""Slurm access: one interface (`base.SlurmBackend`), two backends (Slurm CLI, pyslurm)."""

from __future__ import annotations

from opsctl.config import Config, SlurmSection
from opsctl.errors import ConfigError
from opsctl.slurm.base import SlurmBackend, SlurmError

__all__ = ["SlurmBackend", "SlurmError", "backend_from_config", "make_backend", "pyslurm_available"]


def pyslurm_available() -> tuple[bool, str]:
    """Whether pyslurm imports here, and why not."""
    try:
        import pyslurm  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError as exc:
        return False, f"pyslurm is not importable: {exc}"
    except Exception as exc:  # a pyslurm built for another Slurm fails in odd ways
        return False, f"pyslurm failed to load: {type(exc).__name__}: {exc}"
    return True, ""


def make_backend(section: SlurmSection) -> SlurmBackend:
    if section.backend in {"pyslurm", "auto"}:
        available, why = pyslurm_available()
        if available:
            from opsctl.slurm.pyslurm_backend import PyslurmBackend

            return PyslurmBackend(section.slurm_conf)
        if section.backend == "pyslurm":
            raise ConfigError(f"slurm.backend = \"pyslurm\" but {why}")
    from opsctl.slurm.cli import CliBackend

    return CliBackend(section.slurm_conf, timeout=section.command_timeout, fmt=section.cli_format)


def backend_from_config(config: Config) -> SlurmBackend:
    return make_backend(config.slurm)
