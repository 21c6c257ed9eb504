"""/etc/exports lines from the inventory, refused unless every export is explicit and confined.

Each export must state its access (rw/ro), write semantics (sync/async), root mapping
(root_squash/no_root_squash/all_squash) and subtree checking, so nothing depends on exportfs's
defaults, and may only name client networks inside the cluster's storage network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

# One option of each group must be given.
REQUIRED = (
    ("rw", "ro"),
    ("sync", "async"),
    ("root_squash", "no_root_squash", "all_squash"),
    ("subtree_check", "no_subtree_check"),
)


def _network(text: str, what: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(text), strict=True)
    except ValueError as exc:
        raise AnsibleFilterError(
            f"nfs_server: {what} {text!r} is not a network address/prefix ({exc})"
        ) from None


def nfs_export_lines(
    exports: Sequence[Mapping[str, Any]], default_clients: str, storage_network: str
) -> list[str]:
    if not exports:
        return []
    if not storage_network:
        raise AnsibleFilterError("nfs_server: cluster_storage_network is not set; exports are confined to it")
    storage = _network(storage_network, "cluster_storage_network")
    lines = []
    for export in exports:
        path = str(export.get("path", ""))
        if not path.startswith("/"):
            raise AnsibleFilterError(f"nfs_server: export path {path!r} must be absolute")
        options = [o.strip() for o in str(export.get("options") or "").split(",") if o.strip()]
        for group in REQUIRED:
            if not any(o in group for o in options):
                raise AnsibleFilterError(
                    f"nfs_server: export {path} must state one of {'/'.join(group)} in its options"
                )
        clients = str(export.get("clients") or default_clients)
        net = _network(clients, f"clients of {path}")
        if net.version != storage.version or not net.subnet_of(storage):  # type: ignore[arg-type]
            raise AnsibleFilterError(
                f"nfs_server: export {path} to {clients} is outside the storage network {storage_network}"
            )
        lines.append(f"{path} {net}({','.join(options)})")
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nfs_export_lines": nfs_export_lines}
