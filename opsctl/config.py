"""opsctl.toml: search order, one dataclass per section, validation that names the bad key.

Search order: `--config PATH`, then `$OPSCTL_CONFIG`, then `/etc/opsctl/opsctl.toml`; if none of
them exists, the documented defaults apply (a path given explicitly must exist).

Adding a section (other areas: `[health]`, `[launch]`, `[preflight]`, `[remediator]`): write a
dataclass whose fields have defaults and simple types (str, int, float, bool, `X | None`,
`list[str]`, `dict[str, str]`); declare the values a key accepts once, with
`field(metadata=limits(...))` (the loader enforces them, the generated reference lists them); mark
path fields with `limits(path=True)` so relative paths resolve against the config file; say what a
key means in a comment on or above it (the reference takes it from there); give it a
`validate(self) -> None` method only for checks across keys, raising ValueError("key: message").
Then either add one line to `SECTIONS` below ("module:Class", imported only when a config is
loaded) or call `register_section(name, cls)` before loading; then `make reference`.
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


def limits(
    *,
    choices: tuple[str, ...] = (),
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    path: bool = False,
) -> dict[str, Any]:
    """Field metadata: the values a key accepts (enforced by the loader, listed in the reference)."""
    meta: dict[str, Any] = {}
    if choices:
        meta["choices"] = choices
    for name, bound in (("ge", ge), ("gt", gt), ("le", le)):
        if bound is not None:
            meta[name] = bound
    if path:
        meta["path"] = True
    return meta


def field_limits(cls: type[Any], key: str) -> typing.Mapping[str, Any]:
    """The limits a section's key declares, for a CLI option that sets the same value."""
    return next(f.metadata for f in dataclasses.fields(cls) if f.name == key)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def describe_limits(meta: typing.Mapping[str, Any]) -> str:
    """What a key accepts, in words: "one of a, b", "between 0 and 1", "in (0, 60]", ">= 0"."""
    if "choices" in meta:
        return "one of " + ", ".join(meta["choices"])
    ge, gt, le = meta.get("ge"), meta.get("gt"), meta.get("le")
    if ge is not None and le is not None:
        return f"between {_num(ge)} and {_num(le)}"
    if gt is not None and le is not None:
        return f"in ({_num(gt)}, {_num(le)}]"
    if ge is not None:
        return f">= {_num(ge)}"
    if gt is not None:
        return f"> {_num(gt)}"
    if le is not None:
        return f"<= {_num(le)}"
    return ""


def check_limits(value: Any, meta: typing.Mapping[str, Any]) -> str | None:
    """None if VALUE is accepted, else the message ("must be between 0 and 1 (got 1.5)")."""
    if value is None:
        return None
    if "choices" in meta:
        ok = value in meta["choices"]
        return None if ok else f"must be {describe_limits(meta)} (got {value!r})"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    ok = (
        (meta.get("ge") is None or value >= meta["ge"])
        and (meta.get("gt") is None or value > meta["gt"])
        and (meta.get("le") is None or value <= meta["le"])
    )
    return None if ok else f"must be {describe_limits(meta)} (got {_num(value)})"


def check_fields(section: Any) -> None:
    """Raise ValueError("key: must be ...") for the first field of a section instance outside its
    declared limits: validate() of a section built in code (not loaded) checks what the loader would."""
    for f in dataclasses.fields(section):
        problem = check_limits(getattr(section, f.name), f.metadata)
        if problem:
            raise ValueError(f"{f.name}: {problem}")


@dataclass
class SlurmSection:
    # auto: pyslurm when it imports, else the Slurm CLI
    backend: str = field(default="auto", metadata=limits(choices=("auto", "cli", "pyslurm")))
    partition: str | None = None  # the partition guardrails count against (unset: all nodes)
    slurm_conf: str | None = field(default=None, metadata=limits(path=True))  # exported as SLURM_CONF
    # seconds per Slurm command; a timeout reads as "unreachable" (exit 3)
    command_timeout: float = field(default=30.0, metadata=limits(gt=0, le=3600))
    # how the CLI backend reads Slurm: its JSON output, its text output, or auto (docs/slurm.md)
    cli_format: str = field(default="auto", metadata=limits(choices=("auto", "json", "text")))


@dataclass
class PrometheusSection:
    url: str = "http://127.0.0.1:9090"  # the Prometheus that scrapes dcgm-exporter and node_exporter

    def validate(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url: must start with http:// or https:// (got {self.url!r})")


@dataclass
class GuardrailsSection:
    # share of the partition that may be out of service (drained or down) at once ...
    max_drain_fraction: float = field(default=0.10, metadata=limits(ge=0, le=1))
    min_drain_nodes: int = field(default=1, metadata=limits(ge=0))  # ... but always at least this many


@dataclass
class AuditSection:
    # one JSON object per drain, resume or quarantine action, whatever its outcome
    log: str = field(default="/var/log/opsctl/audit.jsonl", metadata=limits(path=True))


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


def section_class(name: str) -> type[Any]:
    """The dataclass of section `name`, importing it on first use."""
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
            self.sections[name] = section_class(name)()
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
        config.sections[name] = _build_section(where, name, section_class(name), table, base_dir)
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
        problem = check_limits(value, fields[key].metadata)
        if problem:
            raise ConfigError(f"{where}: {name}.{key}: {problem}")
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
