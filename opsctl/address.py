"""Where to reach a node when its name does not resolve: ``"host"`` or ``"host:port"`` (the lab's
machines, the test rigs' sshd on loopback ports). Stdlib only: config sections validate with it."""

from __future__ import annotations


def split_address(addr: str) -> tuple[str, int | None]:
    """``"10.0.0.5"`` -> (host, None); ``"127.0.0.1:2222"`` -> (host, 2222)."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = addr, ""
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"expected host or host:port, got {addr!r}")
    if not port:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad port in {addr!r}")
    return host, int(port)


def check_addresses(key: str, addresses: dict[str, str]) -> None:
    """Config validation of a ``{node: address}`` table: ValueError naming ``key.node``."""
    for node, addr in addresses.items():
        try:
            split_address(addr)
        except ValueError as exc:
            raise ValueError(f"{key}.{node}: {exc}") from None


def check_absolute(key: str, path: str | None) -> None:
    if path is not None and not path.startswith("/"):
        raise ValueError(f"{key}: must be an absolute path (got {path!r})")
