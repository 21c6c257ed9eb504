"""Which ports are the compute fabric: the inventory's InfiniBand HCAs (``[health] ib_devices``,
rendered by the opsctl_remediation role from ``ib_fabric_hcas``) decide, so the Ethernet ports of
ConnectX and BlueField cards beside the fabric never fail a healthy node. The genuine H100 sample
has eight NDR InfiniBand ports and four Ethernet ports (one up, three down)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from opsctl.checks import judge
from opsctl.checks.settings import HealthSection
from opsctl.evidence.convert import ib_from_ibstat, ib_from_sysfs
from opsctl.evidence.model import Evidence
from opsctl.parsers.ib_sysfs import parse_flattened, parse_ib_sysfs
from opsctl.parsers.ibstat import parse_ibstat

FABRIC = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
SAMPLE = "ibstat.h100.some_down.gpud.txt"
Reader = Callable[[str], str]


def _ib_port(text: str, devices: list[str] | None) -> list[tuple[str, str]]:
    ev = Evidence(node="gpu-001", source="ssh", collected_at=0.0, provides=frozenset({"ib"}))
    ev.ib_ports = ib_from_ibstat(parse_ibstat(text))
    th = HealthSection(ib_devices=devices).load_thresholds()
    verdicts = judge([ev], th, 0.0)[0].verdicts
    return sorted((v.status.value, v.summary) for v in verdicts if v.code == "ib-port")


def _down(text: str, device: str) -> str:
    """The sample with ``device``'s port down as a dead cable leaves it."""
    head, _, rest = text.partition(f"CA '{device}'\n")
    block, sep, tail = rest.partition("\nCA '")
    block = block.replace("State: Active", "State: Down")
    block = block.replace("Physical state: LinkUp", "Physical state: Polling")
    return head + f"CA '{device}'\n" + block + sep + tail


@pytest.mark.parametrize("devices", [FABRIC, None], ids=["inventory", "link-layer"])
def test_the_real_h100_node_reads_ok_with_its_ethernet_ports_down(real: Reader, devices) -> None:
    assert _ib_port(real(SAMPLE), devices) == [("OK", "8 ports active at 400 Gb/s")]


@pytest.mark.parametrize("devices", [FABRIC, None], ids=["inventory", "link-layer"])
def test_the_real_h100_node_fails_when_a_fabric_port_is_down(real: Reader, devices) -> None:
    got = _ib_port(_down(real(SAMPLE), "mlx5_10"), devices)
    assert [s for s, _ in got] == ["FAIL"] and got[0][1].startswith("mlx5_10/1: state DOWN")


def test_an_ethernet_port_listed_as_fabric_fails_on_its_link_layer(real: Callable[[str], str]) -> None:
    # an inventory that names an Ethernet device (a miscabled or misconfigured card) is told so
    got = _ib_port(real(SAMPLE), [*FABRIC, "mlx5_1"])
    assert got == [("FAIL", "mlx5_1/1: rate 100 < 400, link layer Ethernet")]


def test_a_fabric_hca_that_disappeared_fails(real: Callable[[str], str]) -> None:
    text = real(SAMPLE)
    head, _, rest = text.partition("CA 'mlx5_11'\n")
    gone = head + "CA '" + rest.partition("\nCA '")[2]
    assert ("FAIL", "mlx5_11 missing") in _ib_port(gone, FABRIC)


@pytest.mark.parametrize(
    ("devices", "error"),
    [
        (["mlx5_0", "mlx5_0"], "ib_devices: mlx5_0 listed twice"),
        (["mlx5 0"], "ib_devices: 'mlx5 0' is not an RDMA device name"),
        ([""], "ib_devices: '' is not an RDMA device name"),
    ],
)
def test_bad_ib_devices_are_refused(devices: list[str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        HealthSection(ib_devices=devices).validate()


def test_ib_devices_replace_the_thresholds_list_and_none_keeps_it() -> None:
    assert HealthSection(ib_devices=FABRIC).load_thresholds().get("ib", "devices") == FABRIC
    assert HealthSection().load_thresholds().get("ib", "devices") == []


# A second genuine H100 node (its sysfs tree): eight NDR HCAs mlx5_0, 1, 4-9 beside mlx5_bond_0, an
# Ethernet bond of the other two ports at 200 Gb/s.
SYSFS = "sysfs-class-infiniband.h100.ports.flattened.gpud.txt"
SYSFS_FABRIC = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]


def _sysfs_ib_port(files: dict[str, str], devices: list[str] | None) -> list[tuple[str, str]]:
    ev = Evidence(node="gpu-001", source="ssh", collected_at=0.0, provides=frozenset({"ib"}))
    ev.ib_ports = ib_from_sysfs(parse_ib_sysfs(files))
    verdicts = judge([ev], HealthSection(ib_devices=devices).load_thresholds(), 0.0)[0].verdicts
    return sorted((v.status.value, v.summary) for v in verdicts if v.code == "ib-port")


@pytest.mark.parametrize("devices", [SYSFS_FABRIC, None], ids=["inventory", "link-layer"])
def test_the_real_sysfs_tree_with_an_ethernet_bond_reads_ok_and_fails_on_a_fabric_port(
    real: Reader, devices
) -> None:
    files = parse_flattened(real(SYSFS))
    assert files["mlx5_bond_0/ports/1/link_layer"] == "Ethernet"
    assert _sysfs_ib_port(files, devices) == [("OK", "8 ports active at 400 Gb/s")]
    bond = "mlx5_bond_0/ports/1"
    bond_down = files | {f"{bond}/state": "1: DOWN", f"{bond}/phys_state": "3: Disabled"}
    assert _sysfs_ib_port(bond_down, devices) == [("OK", "8 ports active at 400 Gb/s")]
    fabric_down = files | {"mlx5_7/ports/1/state": "1: DOWN", "mlx5_7/ports/1/phys_state": "2: Polling"}
    got = _sysfs_ib_port(fabric_down, devices)
    assert [s for s, _ in got] == ["FAIL"] and got[0][1].startswith("mlx5_7/1: state DOWN")
