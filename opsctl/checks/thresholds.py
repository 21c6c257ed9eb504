"""Thresholds are data: a TOML file shipped with the package, merged with a site override."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from opsctl.checks.fixes import XID_CLASSES
from opsctl.checks.xid_catalogue import (
    XID_RECOVERY_CHANGED,
    XidEntry,
    catalogue,
    recovery_class,
    xid154_class,
)
from opsctl.errors import ConfigError

__all__ = ["Thresholds", "XidEntry", "load_thresholds"]


def _merge(base: dict[str, Any], over: dict[str, Any], where: str = "") -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        here = f"{where}.{key}" if where else key
        if key not in base and where not in ("xid.classes", "ib.counters_fail", "ib.counters_warn"):
            raise ConfigError(f"thresholds: unknown key {here!r}")
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = _merge(base[key], value, here)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Thresholds:
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, section: str, key: str) -> Any:
        return self.data[section][key]

    def xid_class(self, xid: int, message: str = "", recovery: str | None = None) -> str:
        """The action class of an XID: the site's [xid.classes] entry, else NVIDIA's catalogue (for
        XID 154, the action its message names, else the recovery action the source serves for its
        GPU), else [xid] default_class (unknown is fatal)."""
        return self.xid_class_basis(xid, message, recovery)[0]

    def xid_class_basis(self, xid: int, message: str = "", recovery: str | None = None) -> tuple[str, str]:
        """The class of :meth:`xid_class` and what gave it: "site" ([xid.classes]), "message" (XID
        154's own text), "recovery_action" (XID 154 without a message that names the action: the
        driver's recovery action for that GPU, ``recovery``, as the same source serves it),
        "catalogue" or "default" ([xid] default_class)."""
        site: dict[str, str] = self.data["xid"]["classes"]
        if str(xid) in site:
            return site[str(xid)], "site"
        if xid == XID_RECOVERY_CHANGED:
            named = xid154_class(message) if message else None
            if named is not None:
                return named, "message"
            if recovery is not None:
                return recovery_class(recovery), "recovery_action"
        entry = catalogue().get(xid)
        if entry is not None:
            return entry.cls, "catalogue"
        return str(self.data["xid"]["default_class"]), "default"

    def xid_entry(self, xid: int) -> XidEntry | None:
        """NVIDIA's catalogue row (mnemonic, published bucket, note) for evidence and docs."""
        return catalogue().get(xid)


def default_data() -> dict[str, Any]:
    text = resources.files("opsctl.checks").joinpath("thresholds.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def load_thresholds(override: str | Path | dict[str, Any] | None = None) -> Thresholds:
    """Defaults merged with an override file (or mapping); any bad value is a ConfigError."""
    data = default_data()
    if override is not None:
        if isinstance(override, dict):
            over = override
        else:
            try:
                over = tomllib.loads(Path(override).read_text(encoding="utf-8"))
            except FileNotFoundError as exc:
                raise ConfigError(f"thresholds file not found: {override}") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"thresholds file {override}: {exc}") from exc
        data = _merge(data, over)
    _validate(data)
    return Thresholds(data)


def _validate(data: dict[str, Any]) -> None:
    for xid, cls in data["xid"]["classes"].items():
        if not str(xid).isdigit() or int(xid) <= 0 or cls not in XID_CLASSES:
            raise ConfigError(
                f"thresholds: xid.classes.{xid} = {cls!r}; classes are {', '.join(XID_CLASSES)}"
            )
    if data["xid"]["default_class"] not in XID_CLASSES:
        raise ConfigError(f"thresholds: xid.default_class must be one of {', '.join(XID_CLASSES)}")
    fatal = data["sxid"]["always_fatal"]
    if not isinstance(fatal, list) or not all(isinstance(x, int) and x > 0 for x in fatal):
        raise ConfigError("thresholds: sxid.always_fatal must be a list of SXid numbers")
    settle = data["fabric"]["settle_seconds"]
    if not isinstance(settle, int | float) or settle < 0:
        raise ConfigError("thresholds: fabric.settle_seconds must be a non-negative number")
    window = data["xid"]["window_seconds"]
    if not isinstance(window, int | float) or window <= 0:
        raise ConfigError("thresholds: xid.window_seconds must be a positive number")
    for key in ("thermal", "power_brake"):
        if data["throttle"][key] not in ("OK", "WARN", "FAIL"):
            raise ConfigError(f"thresholds: throttle.{key} must be OK, WARN or FAIL")
    if not isinstance(data["gpu"]["expected_per_node"], int) or data["gpu"]["expected_per_node"] < 0:
        raise ConfigError("thresholds: gpu.expected_per_node must be a non-negative integer")
    for section in ("counters_fail", "counters_warn"):
        for name, value in data["ib"][section].items():
            if not isinstance(value, int) or value < 0:
                raise ConfigError(f"thresholds: ib.{section}.{name} must be a non-negative integer")
