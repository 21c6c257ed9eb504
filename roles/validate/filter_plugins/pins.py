"""The validate role's view of what a node runs against what the inventory pins."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any


def pin_drift(lines: Iterable[str], packages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The pinned packages a node runs at another version than the pin's apt pattern.

    ``lines``: ``dpkg-query --showformat='${Package} ${Version} ${db:Status-Abbrev}'`` output (held
    packages show as ``hi``); ``packages``: ``node_update_packages`` ([{name, version}]). A package not
    installed is no drift: installing it changes nothing a running job uses.
    """
    installed = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2][1:2] == "i":
            installed[fields[0]] = fields[1]
    drift = []
    for pkg in packages:
        have = installed.get(str(pkg["name"]))
        if have and not fnmatchcase(have, str(pkg["version"])):
            drift.append(f"{pkg['name']} {have} (pinned {pkg['version']})")
    return drift


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pin_drift": pin_drift}
