from __future__ import annotations

import time
from pathlib import Path

import pytest

from opsctl.errors import EXIT_USAGE
from opsctl.hwsim.faults import FAULTS, FaultError, apply_fault, heal
from opsctl.hwsim.state import (
    FB_TOTAL_MIB,
    RECOVERY_GPU_RESET,
    RECOVERY_NODE_REBOOT,
    RECOVERY_NONE,
    NodeHardware,
    ensure_node,
    load,
    make_node,
    save,
    state_path,
)

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
    ("specs", "actions"),
    [
        (["xid=79,gpu=3"], {3: RECOVERY_NODE_REBOOT}),
        (["ecc_dbe,gpu=2"], {2: RECOVERY_GPU_RESET}),
        (["nvlink_down,gpu=4,link=2"], {4: RECOVERY_GPU_RESET}),
        (["xid=13,gpu=1", "xid=45,gpu=1"], {}),  # application XIDs: the GPU needs nothing
        (["xid=79,gpu=5", "xid=48,gpu=5"], {5: RECOVERY_NODE_REBOOT}),  # the stronger action stays
        (["xid=48,gpu=5", "xid=79,gpu=5"], {5: RECOVERY_NODE_REBOOT}),
    ],
)
def test_faults_set_the_recovery_action_the_driver_would(
    node: NodeHardware, specs: list[str], actions: dict[int, int]
) -> None:
    for spec in specs:
        apply_fault(node, spec)
    assert {g.index: g.recovery_action for g in node.gpus if g.recovery_action != RECOVERY_NONE} == actions


def test_gpu_reset_clears_that_gpu_within_the_same_boot(node: NodeHardware) -> None:
    for spec in ("ecc_dbe,gpu=2", "nvlink_down,gpu=2,link=5", "ecc_dbe,gpu=3", "busy"):
        apply_fault(node, spec)
    boot = node.boot_time
    before = time.time()
    apply_fault(node, "gpu_reset,gpu=2")
    g, other = node.gpu(2), node.gpu(3)
    assert (g.ecc_dbe_volatile, g.remapped_rows_pending, g.recovery_action, g.last_xid) == (0, False, 0, 0)
    assert not g.reset_required and all(link.up for link in g.nvlinks) and g.gpu_util_pct == 0
    # what lasts: the aggregate count and the remapped row; DCGM's XID view restarts, the kernel log
    # keeps the lines
    assert (g.ecc_dbe_aggregate, g.remapped_rows_uncorrectable) == (1, 1)
    assert g.dcgm_xid_since >= before and [x.gpu for x in node.xids if x.xid == 48] == [2, 3]
    assert node.boot_time == boot
    assert (other.ecc_dbe_volatile, other.recovery_action, other.remapped_rows_pending) == (1, 1, True)


def test_gpu_reset_cannot_reach_a_gpu_that_needs_a_reboot(node: NodeHardware) -> None:
    apply_fault(node, "xid=79,gpu=1")
    apply_fault(node, "gpu_missing=6")
    before = node.to_dict()
    for spec, why in (("gpu_reset,gpu=1", "needs a node reboot"), ("gpu_reset,gpu=6", "not on the bus")):
        with pytest.raises(FaultError, match=why):
            apply_fault(node, spec)
    assert node.to_dict() == before


def test_reboot_clears_volatile_state_and_keeps_damage(node: NodeHardware) -> None:
    for spec in (
        "xid=79,gpu=3", "ecc_dbe,gpu=1", "row_remap_failure,gpu=6", "gpu_missing=4", "ib_down=mlx5_2",
        "nvlink_down,gpu=0,link=1", "thermal,gpu=5", "exporter_down", "slurmd_stopped", "busy",
    ):  # fmt: skip
        apply_fault(node, spec)
    before = time.time()
    apply_fault(node, "reboot")
    assert node.boot_time >= before and node.xids == []
    assert all(g.recovery_action == 0 and not g.reset_required and g.last_xid == 0 for g in node.gpus)
    assert all(link.up for g in node.gpus for link in g.nvlinks)
    assert all(g.gpu_util_pct == 0 and g.ecc_dbe_volatile == 0 for g in node.gpus)
    assert not node.gpu(1).remapped_rows_pending and node.gpu(1).ecc_dbe_aggregate == 1
    assert node.gpu(5).clock_event_reasons & 0x40 == 0
    assert node.slurmd_up and node.dcgm_exporter_up and node.node_exporter_up
    # damage stays until heal: the failed remap, the lost GPU, the dead port
    assert node.gpu(6).remapped_rows_failure and not node.gpu(4).present
    assert node.hca("mlx5_2").state == "Down"
    assert node.faults[-1] == "reboot"


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
    boot_id = node.boot_id
    heal(node, now=NOW + 60)
    repaired = make_node("gpu-007", now=NOW + 60)
    repaired.boot_time = NOW + 60  # a repaired node has been rebooted: a new boot, a new boot_id
    assert node.boot_id not in (boot_id, repaired.boot_id)
    repaired.boot_id = node.boot_id
    assert node == repaired


def test_every_fault_is_documented() -> None:
    required = {"xid", "ecc_dbe", "gpu_missing", "ib_down", "row_remap_failure"}
    required |= {"exporter_down", "slurmd_stopped", "reboot", "gpu_reset"}
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


def test_a_clock_step_moves_only_the_boot_time_and_a_reboot_is_a_new_boot_id(node: NodeHardware) -> None:
    boot, boot_id = node.boot_time, node.boot_id
    assert len(boot_id) == 36 and make_node(node.node, now=NOW).boot_id == boot_id  # seeded per boot
    apply_fault(node, "clock_step=30")
    assert (node.boot_time, node.boot_id) == (boot + 30, boot_id)
    apply_fault(node, "clock_step=-90")
    assert (node.boot_time, node.boot_id) == (boot - 60, boot_id)
    for bad in ("clock_step", "clock_step=0", "clock_step=soon"):
        with pytest.raises(FaultError):
            apply_fault(node, bad)
    apply_fault(node, "reboot")
    assert node.boot_id != boot_id and node.boot_time > boot
    rebooted = node.boot_id
    heal(node)
    assert node.boot_id not in (boot_id, rebooted)


def test_a_state_file_without_a_boot_id_gets_one_that_stays(node: NodeHardware) -> None:
    data = node.to_dict()
    del data["boot_id"]  # written before the simulator kept the kernel's boot_id
    first, again = NodeHardware.from_dict(data), NodeHardware.from_dict(dict(data))
    assert first.boot_id and first.boot_id == again.boot_id
