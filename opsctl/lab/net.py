"""The lab bridge and the nspawn veths on it (host side). No NAT, no forwarding: no route out."""

from __future__ import annotations

import json
from typing import Any

from opsctl.lab.config import LabConfig
from opsctl.lab.shell import run


def _links() -> list[dict[str, Any]]:
    out = run(["ip", "-j", "link", "show"]).stdout
    data = json.loads(out or "[]")
    return data if isinstance(data, list) else []


def veth_name(machine: str) -> str:
    # systemd-nspawn names the host side of --network-bridge "vb-" + machine name (IFNAMSIZ 15).
    return ("vb-" + machine)[:15]


def bridge_exists(bridge: str) -> bool:
    return any(link.get("ifname") == bridge for link in _links())


def lab_veths(cfg: LabConfig) -> list[str]:
    """Host-side veths of this lab: on our bridge, or named after one of our machines."""
    ours = {veth_name(m.name) for m in cfg.machines}
    names = []
    for link in _links():
        name = str(link.get("ifname", "")).split("@")[0]
        if name.startswith("vb-") and (link.get("master") == cfg.bridge or name in ours):
            names.append(name)
    return sorted(names)


def delete_links(names: list[str]) -> None:
    for name in names:
        run(["ip", "link", "del", name], check=False)


def ensure_bridge(cfg: LabConfig) -> None:
    """Create the bridge, or reuse one left by an earlier run; either way it ends up with our address."""
    if not bridge_exists(cfg.bridge):
        run(["ip", "link", "add", cfg.bridge, "type", "bridge"])
    run(["ip", "addr", "replace", f"{cfg.host_address}/{cfg.prefixlen}", "dev", cfg.bridge])
    run(["ip", "link", "set", cfg.bridge, "up"])


def delete_bridge(cfg: LabConfig) -> None:
    if bridge_exists(cfg.bridge):
        run(["ip", "link", "del", cfg.bridge])
