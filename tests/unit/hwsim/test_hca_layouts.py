"""Port layouts of the simulated HCAs, diffed against the genuine ibstat samples they are taken
from: a node built with a layout shows what the real node showed, Ethernet ports of ConnectX cards
included, and keeps that layout through faults, reboots and repairs."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.hwsim.faults import apply_fault, heal
from opsctl.hwsim.metrics import infiniband_families
from opsctl.hwsim.render_ib import render_ibstat, sysfs_files
from opsctl.hwsim.state import HCA_LAYOUTS, NodeHardware, make_node
from opsctl.parsers.ibstat import parse_ibstat

REAL_WORLD = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"
MIXED = "h100-ndr8-eth4"
# layout -> the genuine sample it reproduces: the reference node's eight ConnectX-7 NDR ports are
# the InfiniBand ports of the same H100 sample, numbered 0-7 as on a node with no other RDMA device
SAMPLES = {"h200-ndr8": "ibstat.h100.some_down.gpud.txt", MIXED: "ibstat.h100.some_down.gpud.txt"}


def _ports(text: str) -> list[tuple[str, str, str, str, float | None, str]]:
    """What the checks read of each port: (device, link layer, state, physical state, rate, CA type)."""
    report = parse_ibstat(text)
    assert not report.errors
    return sorted(
        (ca.name, p.link_layer, p.state, p.physical_state, p.rate, ca.ca_type)
        for ca in report.cas
        for p in ca.ports
    )


@pytest.mark.parametrize("layout", sorted(SAMPLES))
def test_a_layout_renders_the_ports_of_its_genuine_sample(layout: str) -> None:
    want = _ports((REAL_WORLD / SAMPLES[layout]).read_text())
    got = _ports(render_ibstat(make_node("gpu-007", hca_layout=layout)))
    if layout == "h200-ndr8":
        ib = sorted((p for p in want if p[1] == "InfiniBand"), key=lambda p: int(p[0][5:]))
        want = sorted((f"mlx5_{i}", *p[1:]) for i, p in enumerate(ib))
    assert got == want


def test_every_layout_is_one_of_the_samples() -> None:
    assert set(HCA_LAYOUTS) == set(SAMPLES)


def test_the_ethernet_ports_are_ethernet_in_sysfs_and_still_infiniband_class_series() -> None:
    node = make_node("gpu-007", hca_layout=MIXED)
    files = sysfs_files(node)
    assert files["mlx5_1/ports/1/link_layer"] == "Ethernet\n"
    assert files["mlx5_9/ports/1/link_layer"] == "InfiniBand\n"
    assert files["mlx5_2/ports/1/state"] == "1: DOWN\n"
    # node_exporter reads every device under /sys/class/infiniband and exports no link layer:
    # the Ethernet ports are node_infiniband_* series like the fabric's
    (state,) = [f for f in infiniband_families(node) if f.name == "node_infiniband_state_id"]
    assert {(s.labels["device"], s.value) for s in state.samples} == {
        *((f"mlx5_{i}", 4.0) for i in (0, 1, 3, 4, 5, 6, 9, 10, 11)),
        *((f"mlx5_{i}", 1.0) for i in (2, 7, 8)),
    }
    assert all("link_layer" not in s.labels for s in state.samples)


def _layout(node: NodeHardware) -> list[tuple[str, str, str, int]]:
    return [(h.name, h.link_layer, h.state, h.rate_gbps) for h in node.hcas]


def test_the_layout_survives_faults_reboots_and_repairs() -> None:
    node = make_node("gpu-007", hca_layout=MIXED)
    healthy = _layout(node)
    apply_fault(node, "ib_down=mlx5_9")
    assert node.hca("mlx5_9").state == "Down"
    apply_fault(node, "reboot")
    assert node.hca("mlx5_9").state == "Down"  # a dead cable stays dead across a reboot
    heal(node)
    assert node.hca_layout == MIXED and _layout(node) == healthy
    assert NodeHardware.from_dict(node.to_dict()) == node


def test_the_default_node_is_unchanged_by_layouts() -> None:
    node = make_node("gpu-007")
    assert node.hca_layout == "h200-ndr8"
    assert [h.name for h in node.hcas] == [f"mlx5_{i}" for i in range(8)]
    assert {h.link_layer for h in node.hcas} == {"InfiniBand"}
    old = node.to_dict()
    del old["hca_layout"]  # a state file written before layouts existed
    for h in old["hcas"]:
        del h["link_layer"], h["ca_type"]
    assert NodeHardware.from_dict(old) == node


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown HCA layout 'bogus'"):
        make_node("gpu-007", hca_layout="bogus")
