from __future__ import annotations

import time
from pathlib import Path

import pytest

from opsctl.errors import EXIT_USAGE
from opsctl.hwsim.faults import FAULTS, FaultError, apply_fault, heal
from opsctl.hwsim.state import FB_TOTAL_MIB, NodeHardware, ensure_node, load, make_node, save, state_path

NOW = 1_796_000_000.0


def test_same_name_same_hardware_and_different_names_differ() -> None:
    a, b, c = make_node("gpu-001", now=NOW), make_node("gpu-001", now=NOW), make_node("gpu-002", now=NOW)
    assert a == b
    assert {g.uuid for g in a.gpus}.isdisjoint({g.uuid for g in c.gpus})
    assert {h.lid for h in a.hcas}.isdisjoint({h.lid for h in c.hcas})
    assert {h.node_guid for h in a.hcas}.isdisjoint({h.node_guid for h in c.hcas})


def test_h200_profile(node: NodeHardware) -> None:
    assert len(node.gpus) == 8 and len(node.hcas) == 8
    assert len({g.uuid for g in node.gpus}) == 8 and len({g.serial for g in node.gpus}) == 8
    assert len({g.bus_id for g in node.gpus}) == 8
    assert all(g.fb_total_mib == FB_TOTAL_MIB == 143771 for g in node.gpus)
    assert [g.numa_node for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(len(g.nvlinks) == 18 and all(link.up for link in g.nvlinks) for g in node.gpus)
    assert [h.name for h in node.hcas] == [f"mlx5_{i}" for i in range(8)]
    assert all(h.state == "Active" and h.physical_state == "LinkUp" and h.rate_gbps == 400 for h in node.hcas)
    assert node.slurmd_up and node.dcgm_exporter_up and node.node_exporter_up and not node.xids


def test_save_load_round_trip(tmp_path: Path, node: NodeHardware) -> None:
    apply_fault(node, "xid=79,gpu=3")
    save(node, tmp_path / "n.json")
    assert load(tmp_path / "n.json") == node
    assert not list(tmp_path.glob(".n.json.*"))  # no temp file left behind


def test_ensure_node_creates_once(tmp_path: Path) -> None:
    first = ensure_node(tmp_path, "gpu-003")
    apply_fault(first, "slurmd_stopped")
    save(first, state_path(tmp_path, "gpu-003"))
    assert ensure_node(tmp_path, "gpu-003").slurmd_up is False


def test_xid_fault(node: NodeHardware) -> None:
    apply_fault(node, "xid=79,gpu=3")
    (event,) = node.xids
    assert (event.gpu, event.xid, event.pid) == (3, 79, None)
    assert "fallen off the bus" in event.message
    assert node.gpu(3).last_xid == 79 and node.gpu(3).reset_required
    assert node.gpu(0).last_xid == 0
    assert node.faults == ["xid=79,gpu=3"]


def test_xid_defaults_to_gpu0_with_a_process(node: NodeHardware) -> None:
    apply_fault(node, "xid=13")
    assert node.xids[0].gpu == 0 and node.xids[0].pid is not None and node.xids[0].process == "python3"


def test_ecc_dbe(node: NodeHardware) -> None:
    apply_fault(node, "ecc_dbe,gpu=2,count=3")
    g = node.gpu(2)
    assert (g.ecc_dbe_volatile, g.ecc_dbe_aggregate, g.remapped_rows_uncorrectable) == (3, 3, 3)
    assert g.remapped_rows_pending and [x.xid for x in node.xids] == [48]


def test_gpu_missing(node: NodeHardware) -> None:
    apply_fault(node, "gpu_missing=3")
    assert [g.index for g in node.present_gpus] == [0, 1, 2, 4, 5, 6, 7]


def test_ib_down(node: NodeHardware) -> None:
    before = node.hca("mlx5_2").counters["link_downed"]
    apply_fault(node, "ib_down=mlx5_2")
    h = node.hca("mlx5_2")
    assert (h.state, h.physical_state) == ("Down", "Polling")
    assert h.counters["link_downed"] == before + 1
    assert all(o.state == "Active" for o in node.hcas if o.name != "mlx5_2")


def test_row_remap_failure_exporter_and_slurmd(node: NodeHardware) -> None:
    apply_fault(node, "row_remap_failure,gpu=6")
    apply_fault(node, "exporter_down")
    apply_fault(node, "slurmd_stopped")
    assert node.gpu(6).remapped_rows_failure and node.xids[-1].xid == 64
    assert not node.dcgm_exporter_up and not node.node_exporter_up and not node.slurmd_up


@pytest.mark.parametrize(
    "spec",
    ["bogus", "xid", "xid=abc", "xid=79,gpu=9", "ib_down=mlx5_9", "gpu_missing=x", "xid=79,gpu", "", "xid=0"],
)
def test_bad_fault_is_a_usage_error_and_changes_nothing(node: NodeHardware, spec: str) -> None:
    before = node.to_dict()
    with pytest.raises(FaultError) as err:
        apply_fault(node, spec)
    assert err.value.exit_code == EXIT_USAGE
    assert node.to_dict() == before


def test_unknown_fault_lists_the_known_ones(node: NodeHardware) -> None:
    with pytest.raises(FaultError, match=r"unknown fault 'bogus'; known: .*ecc_dbe.*xid"):
        apply_fault(node, "bogus")


def test_heal_restores_the_seeded_node(node: NodeHardware) -> None:
    specs = ["xid=79", "ecc_dbe,gpu=1", "gpu_missing=3", "ib_down=mlx5_2", "exporter_down", "slurmd_stopped"]
    for spec in specs:
        apply_fault(node, spec)
    heal(node, now=NOW)
    assert node == make_node("gpu-007", now=NOW)


def test_every_fault_is_documented() -> None:
    required = {"xid", "ecc_dbe", "gpu_missing", "ib_down", "row_remap_failure"}
    required |= {"exporter_down", "slurmd_stopped"}
    assert required <= set(FAULTS)


def test_busy_loads_all_gpus_or_one(node: NodeHardware) -> None:
    apply_fault(node, "busy,gpu=2")
    assert node.gpu(2).gpu_util_pct == 100 and node.gpu(3).gpu_util_pct == 0
    apply_fault(node, "busy")
    assert all(g.gpu_util_pct == 100 and g.fb_used_mib > 0 for g in node.gpus)
    assert not any(g.clock_event_reasons & 0x1 for g in node.gpus)  # none idle
    assert all(g.fb_free_mib == g.fb_total_mib - g.fb_reserved_mib - g.fb_used_mib for g in node.gpus)


def test_busy_moves_ib_data_until_the_link_drops(node: NodeHardware) -> None:
    from opsctl.hwsim.metrics import infiniband_families
    from opsctl.hwsim.render_ib import render_perfquery_x, sysfs_files

    idle = node.hca("mlx5_3").current_counters(NOW + 100)
    assert idle == node.hca("mlx5_3").counters  # no job, no traffic
    apply_fault(node, "busy")
    h = node.hca("mlx5_3")
    t0 = h.traffic_since
    later = h.current_counters(t0 + 10)
    assert later["port_rcv_data"] - h.counters["port_rcv_data"] == int(40e9 * 10 // 4)
    # Every view reads the same counters at the same instant.
    files = sysfs_files(node, t0 + 10)
    assert files["mlx5_3/ports/1/counters/port_rcv_data"] == f"{later['port_rcv_data']}\n"
    assert f"PortRcvData:.....................{later['port_rcv_data']}" in render_perfquery_x(
        node, "mlx5_3", now=t0 + 10
    )
    fams = {f.name: f for f in infiniband_families(node, now=t0 + 10)}
    received = fams["node_infiniband_port_data_received_bytes_total"].samples
    sample = next(s for s in received if s.labels["device"] == "mlx5_3")
    assert sample.value == later["port_rcv_data"] * 4
    apply_fault(node, "ib_down=mlx5_3")
    frozen = node.hca("mlx5_3").current_counters()
    assert node.hca("mlx5_3").current_counters(time.time() + 3600) == frozen
    assert frozen["port_rcv_data"] > idle["port_rcv_data"]  # what moved before the drop is kept
