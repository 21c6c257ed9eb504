from __future__ import annotations

import dataclasses
import json

from opsctl.parsers.ibstat import parse_ibstat


def test_h100_all_active(real):
    r = parse_ibstat(real("ibstat.h100.all_active.gpud.txt"))
    assert not r.errors
    assert [ca.name for ca in r.cas][:3] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert all(p.state == "Active" and p.physical_state == "LinkUp" for ca in r.cas for p in ca.ports)
    mlx5_0 = r.ca("mlx5_0")
    assert mlx5_0 is not None
    assert mlx5_0.ca_type == "MT4129" and mlx5_0.firmware_version == "28.39.1002"
    assert mlx5_0.number_of_ports == 1 and mlx5_0.node_guid == "0xa088c20300e3142a"
    port = mlx5_0.ports[0]
    assert (port.number, port.rate, port.link_layer) == (1, 400.0, "Ethernet")
    assert port.capability_mask == "0x00010000" and port.base_lid == 0
    assert r.ca("mlx5_1").ports[0].rate == 100.0  # the 100G front-end NIC
    json.dumps(dataclasses.asdict(r))


def test_h100_some_down(real):
    r = parse_ibstat(real("ibstat.h100.some_down.gpud.txt"))
    down = [
        (ca.name, p.state, p.physical_state, p.rate) for ca in r.cas for p in ca.ports if p.state != "Active"
    ]
    assert ("mlx5_2", "Down", "Disabled", 40.0) in down
    ib = r.ca("mlx5_0").ports[0]
    assert ib.link_layer == "InfiniBand" and ib.base_lid == 75 and ib.sm_lid == 334


def test_ibpanic_partial_output_keeps_cas_and_reports_error(real):
    r = parse_ibstat(real("ibstat.a100.ibpanic_exit255.gpud.txt"))
    assert len(r.cas) == 8
    assert all(ca.ports[0].rate == 200.0 for ca in r.cas)  # spaces, not tabs, in this sample
    assert len(r.errors) == 1 and r.errors[0].startswith("ibpanic:") and "mlx5_8" in r.errors[0]


def test_empty_and_garbage():
    assert parse_ibstat("").cas == []
    r = parse_ibstat("ibstat: command not found\n")
    assert r.cas == [] and r.errors == ["ibstat: command not found"]
