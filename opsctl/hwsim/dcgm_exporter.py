"""How a dcgm-exporter release names the node in its series' ``Hostname`` label, from its flags.

Read from dcgm-exporter's source at its release tags:

- 3.x (pkg/dcgmexporter/gpu_collector.go ``GetHostname``, 3.3.9-3.6.1): ``$NODE_NAME``, else the
  machine's hostname, whatever the host engine's address.
- 4.x (internal/pkg/hostname/hostname.go, 4.1.1-4.0.4 through 4.5.3-4.8.2): when
  ``-r``/``--remote-hostengine-info`` is given on the command line, the host part of that address
  (``localhost:5555`` gives ``localhost``, on every node); otherwise as 3.x. From exporter 4.1.2
  (4.2.3-4.1.2) on, ``--kubernetes`` brings back the local name.

The label stays ``Hostname`` in every release up to 4.5.3-4.8.2 (renamed ``hostname`` after it).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

# One release per DCGM major, the one the simulator behaves as when only DCGM's version is given
# (an exporter links the DCGM it was built for: a DCGM 4 host engine needs a 4.x exporter).
RELEASE_FOR_DCGM_MAJOR = {"3": "3.3.9-3.6.1", "4": "4.5.3-4.8.2"}


@dataclass(frozen=True)
class ExporterFlags:
    """The flags of a dcgm-exporter command line that decide its node label."""

    remote_hostengine: str | None = None  # -r / --remote-hostengine-info, when given
    kubernetes: bool = False


NO_FLAGS = ExporterFlags()


def parse_flags(command_line: str) -> ExporterFlags:
    """The node-naming flags of a dcgm-exporter command line (a unit's ExecStart)."""
    words = shlex.split(command_line)
    remote: str | None = None
    kubernetes = False
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in ("-r", "--remote-hostengine-info"):
            remote = value if eq else (words[i + 1] if i + 1 < len(words) else "")
        elif name in ("-k", "--kubernetes"):
            kubernetes = value.lower() != "false" if eq else True
    return ExporterFlags(remote, kubernetes)


def release_for(dcgm_version: str) -> str:
    major = dcgm_version.split(".", 1)[0]
    if major not in RELEASE_FOR_DCGM_MAJOR:
        raise ValueError(f"no dcgm-exporter release known for DCGM {dcgm_version}")
    return RELEASE_FOR_DCGM_MAJOR[major]


def exporter_version(release: str) -> tuple[int, ...]:
    """The exporter's own version in a release name: ``4.4.1-4.6.0`` -> (4, 6, 0)."""
    own = release.rsplit("-", 1)[-1]
    try:
        return tuple(int(p) for p in own.split("."))
    except ValueError:
        raise ValueError(f"not a dcgm-exporter release: {release!r} (e.g. 4.4.1-4.6.0)") from None


def hostname_label(release: str, flags: ExporterFlags, node: str) -> str:
    """The ``Hostname`` a ``release`` started with ``flags`` puts on a node named ``node``
    (``$NODE_NAME`` unset, the machine's hostname being the node name)."""
    version = exporter_version(release)
    if version < (4,) or flags.remote_hostengine is None:
        return node
    if flags.kubernetes and version >= (4, 1, 2):
        return node
    address = flags.remote_hostengine
    if address.startswith("["):  # [IPv6]:port
        return address[1:].split("]", 1)[0]
    host, sep, port = address.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else address
