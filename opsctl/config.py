"""opsctl.toml: search order, one dataclass per section, validation that names the bad key.

Search order: `--config PATH`, then `$OPSCTL_CONFIG`, then `/etc/opsctl/opsctl.toml`; if none of
them exists, the documented defaults apply (a path given explicitly must exist).

Adding a section (other areas: `[health]`, `[launch]`, `[preflight]`, `[remediator]`): write a
dataclass whose fields have defaults and simple types (str, int, float, bool, `X | None`,
`list[str]`, `dict[str, str]`);
optionally give it a `validate(self) -> None` method that raises ValueError("key: message"); mark
path fields with `field(metadata={"path": True})` so relative paths resolve against the config
file. Then either add one line to `SECTIONS` below ("module:Class", imported only when a config
is loaded) or call `register_section(name, cls)` before loading.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

from opsctl.errors import ConfigError

SYSTEM_CONFIG = Path("/etc/opsctl/opsctl.toml")
ENV_VAR = "OPSCTL_CONFIG"


@dataclass
class SlurmSection:
    backend: str = "auto"  # auto | cli | pyslurm
    partition: str | None = None  # the partition guardrails count against (None: all nodes)
    slurm_conf: str | None = field(default=None, metadata={"path": True})  # exported as SLURM_CONF
    command_timeout: float = 30.0  # seconds per Slurm command
    cli_format: str = "auto"  # auto | json | text: how the CLI backend reads Slurm

    def validate(self) -> None:
        if self.backend not in {"auto", "cli", "pyslurm"}:
            raise ValueError(f"backend: must be one of auto, cli, pyslurm (got {self.backend!r})")
        if self.cli_format not in {"auto", "json", "text"}:
            raise ValueError(f"cli_format: must be one of auto, json, text (got {self.cli_format!r})")
        if not 0 < self.command_timeout <= 3600:
            raise ValueError(f"command_timeout: must be in (0, 3600] seconds (got {self.command_timeout})")


@dataclass
class PrometheusSection:
    url: str = "http://127.0.0.1:9090"

    def validate(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url: must start with http:// or https:// (got {self.url!r})")


@dataclass
class GuardrailsSection:
    max_drain_fraction: float = 0.10  # share of the partition that may be drained at once
    min_drain_nodes: int = 1  # ...but always at least this many nodes

    def validate(self) -> None:
        if not 0 <= self.max_drain_fraction <= 1:
            raise ValueError(f"max_drain_fraction: must be between 0 and 1 (got {self.max_drain_fraction})")
        if self.min_drain_nodes < 0:
            raise ValueError(f"min_drain_nodes: must be >= 0 (got {self.min_drain_nodes})")


@dataclass
class AuditSection:
    log: str = field(default="/var/log/opsctl/audit.jsonl", metadata={"path": True})


# name -> dataclass, or "module:Class" imported lazily when a config is loaded.
SECTIONS: dict[str, type[Any] | str] = {
    "slurm": SlurmSection,
    "prometheus": PrometheusSection,
    "guardrails": GuardrailsSection,
    "audit": AuditSection,
    "health": "opsctl.checks.settings:HealthSection",
    "launch": "opsctl.launch.settings:LaunchSection",
    "preflight": "opsctl.preflight.settings:PreflightSection",
    "remediator": "opsctl.remediation.settings:RemediatorSection",
}

T = TypeVar("T")


def register_section(name: str, cls: type[Any]) -> None:
    """Make `[name]` a known section (call before loading a config)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"section {name!r}: {cls!r} is not a dataclass")
    SECTIONS[name] = cls


def _section_class(name: str) -> type[Any]:
    entry = SECTIONS[name]
    if isinstance(entry, str):
        module_name, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module_name), attr)
        assert isinstance(entry, type)
        SECTIONS[name] = entry
    return entry


@dataclass
class Config:
    """A loaded configuration: one instance per known section, defaults where absent."""

    path: Path | None = None
    sections: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str, cls: type[T] | None = None) -> T:
        if name not in self.sections:
            if name not in SECTIONS:
                raise KeyError(f"unknown config section {name!r}")
            self.sections[name] = _section_class(name)()
        value = self.sections[name]
        if cls is not None and not isinstance(value, cls):
            raise TypeError(f"section {name!r} is {type(value).__name__}, not {cls.__name__}")
        return typing.cast(T, value)

    @property
    def slurm(self) -> SlurmSection:
        return self.section("slurm", SlurmSection)

    @property
    def prometheus(self) -> PrometheusSection:
        return self.section("prometheus", PrometheusSection)

    @property
    def guardrails(self) -> GuardrailsSection:
        return self.section("guardrails", GuardrailsSection)

    @property
    def audit(self) -> AuditSection:
        return self.section("audit", AuditSection)


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to use, or None for defaults. An explicit or $OPSCTL_CONFIG path must exist."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path} (from ${ENV_VAR})")
        return path
    if SYSTEM_CONFIG.is_file():
        return SYSTEM_CONFIG
    return None


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    """Find and load the configuration (see the module docstring for the search order)."""
    path = find_config(explicit)
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    return parse_config(text, path)


def parse_config(text: str, path: Path | None = None) -> Config:
    where = str(path) if path else "opsctl.toml"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    base_dir = path.parent if path else Path.cwd()
    config = Config(path=path)
    for name, table in raw.items():
        if name not in SECTIONS:
            known = ", ".join(sorted(SECTIONS))
            raise ConfigError(f"{where}: unknown section [{name}] (known: {known})")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [{name}] must be a table")
        config.sections[name] = _build_section(where, name, _section_class(name), table, base_dir)
    return config


def _build_section(where: str, name: str, cls: type[Any], table: dict[str, Any], base_dir: Path) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{where}: unknown key {name}.{key} (known in [{name}]: {known})")
        try:
            value = _coerce(value, hints[key])
        except ValueError as exc:
            raise ConfigError(f"{where}: {name}.{key}: {exc}") from None
        if fields[key].metadata.get("path") and isinstance(value, str):
            value = str((base_dir / Path(value).expanduser()).resolve())
        values[key] = value
    section = cls(**values)
    validate = getattr(section, "validate", None)
    if callable(validate):
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"{where}: {name}.{exc}") from None
    return section


def _coerce(value: Any, hint: Any) -> Any:
    """Check a TOML value against a field's type; ints are accepted where floats are expected."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0] if errors else f"unsupported value {value!r}")
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {_tname(value)}")
        return [_coerce(v, item) for v in value]
    if origin is dict:
        _, item = typing.get_args(hint) or (str, Any)
        if not isinstance(value, dict):
            raise ValueError(f"expected a table, got {_tname(value)}")
        return {str(k): _coerce(v, item) for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_tname(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {_tname(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {_tname(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {_tname(value)}")
        return value
    raise ValueError(f"unsupported field type {hint!r}")


def _tname(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)
