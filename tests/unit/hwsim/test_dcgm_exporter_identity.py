"""How each dcgm-exporter release names the node, as read from its source at the release tags
(opsctl/hwsim/dcgm_exporter.py), applied to the command line the dcgm role renders."""

from __future__ import annotations

import pytest

from opsctl.hwsim.dcgm_exporter import (
    ExporterFlags,
    exporter_version,
    hostname_label,
    parse_flags,
    release_for,
)

ROLE_EXECSTART = (
    "/usr/local/bin/dcgm-exporter --remote-hostengine-info localhost:5555 --collectors "
    "/etc/dcgm-exporter/default-counters.csv --address :9400 --xid-count-window-size 300000 "
    "--hpc-job-mapping-dir /run/dcgm-job-map"
)


def test_the_roles_command_line_names_the_local_host_engine():
    assert parse_flags(ROLE_EXECSTART) == ExporterFlags("localhost:5555", False)
    assert parse_flags("dcgm-exporter -r=10.0.0.5:5555 -k") == ExporterFlags("10.0.0.5:5555", True)
    assert parse_flags("dcgm-exporter --kubernetes=false") == ExporterFlags(None, False)


@pytest.mark.parametrize(
    ("release", "flags", "label"),
    [
        ("3.3.9-3.6.1", ROLE_EXECSTART, "gpu-007"),  # 3.x: the machine's hostname
        ("4.1.1-4.0.4", ROLE_EXECSTART, "localhost"),  # 4.x: the host engine address's host
        ("4.4.1-4.6.0", ROLE_EXECSTART, "localhost"),
        ("4.5.3-4.8.2", ROLE_EXECSTART, "localhost"),
        ("4.5.3-4.8.2", "dcgm-exporter --address :9400", "gpu-007"),  # no -r: the machine's name
        ("4.1.1-4.0.4", ROLE_EXECSTART + " --kubernetes", "localhost"),  # before 4.1.2
        ("4.5.3-4.8.2", ROLE_EXECSTART + " --kubernetes", "gpu-007"),
        ("4.5.3-4.8.2", "dcgm-exporter -r [::1]:5555", "::1"),
        ("4.5.3-4.8.2", "dcgm-exporter -r nodeA", "nodeA"),  # no port: the value as it is
    ],
)
def test_hostname_label_by_release(release: str, flags: str, label: str) -> None:
    assert hostname_label(release, parse_flags(flags), "gpu-007") == label


def test_releases():
    assert exporter_version("4.4.1-4.6.0") == (4, 6, 0)
    assert release_for("4.5.3").startswith("4.") and release_for("3.3.9").startswith("3.")
    with pytest.raises(ValueError, match="not a dcgm-exporter release"):
        exporter_version("latest")
    with pytest.raises(ValueError, match="no dcgm-exporter release known"):
        release_for("5.0.0")
