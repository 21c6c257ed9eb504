from __future__ import annotations

import dataclasses
import json

from opsctl.parsers.ib_sysfs import parse_flattened, parse_ib_sysfs, read_ib_sysfs

FIXTURE = "sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt"


def test_h100_mlx5_0(real):
    devs = parse_ib_sysfs(parse_flattened(real(FIXTURE)))
    assert [d.name for d in devs] == ["mlx5_0"]
    d = devs[0]
    assert (d.board_id, d.fw_ver, d.hca_type) == ("MT_0000000838", "28.41.1000", "MT4129")
    p = d.port(1)
    assert p is not None
    assert (p.state, p.state_code, p.phys_state, p.phys_state_code) == ("ACTIVE", 4, "LinkUp", 5)
    assert (p.rate_gbps, p.rate_detail, p.link_layer) == (400.0, "4X NDR", "InfiniBand")
    assert p.counters["port_rcv_errors"] == 14
    assert p.counters["excessive_buffer_overrun_errors"] == 15
    assert p.counters["symbol_error"] == 0 and p.counters["link_downed"] == 0
    assert p.hw_counters["roce_adp_retrans"] == 3
    json.dumps(dataclasses.asdict(d))


def test_read_live_tree_roundtrip(tmp_path, real):
    # Lay the genuine values out as a real directory tree, then read it back as the module would.
    for rel, value in parse_flattened(real(FIXTURE)).items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    (tmp_path / "mlx5_0" / "ports" / "1" / "counters" / "unreadable").mkdir()  # read fails: skipped
    files = read_ib_sysfs(str(tmp_path))
    assert files["mlx5_0/ports/1/state"].strip() == "4: ACTIVE"
    assert parse_ib_sysfs(files) == parse_ib_sysfs(parse_flattened(real(FIXTURE)))


def test_missing_root_means_no_devices(tmp_path):
    assert read_ib_sysfs(str(tmp_path / "absent")) == {}
    assert parse_ib_sysfs({}) == []


def test_down_port_and_natural_order():
    devs = parse_ib_sysfs(
        {
            "mlx5_10/ports/1/state": "1: DOWN",
            "mlx5_2/ports/1/state": "4: ACTIVE",
            "mlx5_2/ports/1/phys_state": "3: Disabled",
            "mlx5_2/ports/1/counters/symbol_error": "N/A",
        }
    )
    assert [d.name for d in devs] == ["mlx5_2", "mlx5_10"]
    assert devs[1].ports[0].state == "DOWN" and devs[0].ports[0].phys_state == "Disabled"
    assert devs[0].ports[0].counters == {}
