from __future__ import annotations

from dataclasses import replace

import pytest

from opsctl.checks.catalogue import CATALOGUE, CODES
from opsctl.checks.model import Status
from opsctl.checks.runner import judge_node
from opsctl.checks.thresholds import load_thresholds
from opsctl.errors import ConfigError
from opsctl.evidence.convert import gpus_from_nvidia_smi, ib_from_ibstat, ib_from_sysfs, xids_from_dmesg
from opsctl.evidence.model import (
    FACTS,
    Evidence,
    GpuEvidence,
    IbPortEvidence,
    LustreEvidence,
    MountEvidence,
    XidEvent,
)
from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.ib_sysfs import parse_flattened, parse_ib_sysfs
from opsctl.parsers.ibstat import parse_ibstat
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q

NOW = 1_700_000_000.0
ALL = frozenset(FACTS)


def healthy(node: str = "gpu-001", **kw: object) -> Evidence:
    gpus = [
        GpuEvidence(
            index=i,
            ecc_dbe_volatile=0,
            ecc_sbe_per_hour=0.0,
            retired_pages_dbe=0,
            retired_pages_sbe=0,
            retired_pages_pending=False,
            remap_pending=False,
            remap_failure=False,
            nvlink_links_down=0,
            nvlink_links_total=18,
            nvlink_crc_per_second=0.0,
            pcie_gen=5,
            pcie_width=16,
            thermal_throttle=False,
            power_throttle=False,
            uuid=f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd",
            recovery_action="none",
            reset_required=False,
            fabric_state="Completed",
            fabric_status="Success",
        )
        for i in range(8)
    ]
    ports = [
        IbPortEvidence(f"mlx5_{i}", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand", {"symbol_error": 0}, 600.0)
        for i in range(8)
    ]
    ev = Evidence(
        node=node,
        source="test",
        collected_at=NOW,
        gpu_count=8,
        gpus=gpus,
        xids=[],
        sxids=[],
        ib_ports=ports,
        mounts=[],
        slurmd_alive=True,
        dcgm_incidents=[],
        lustre=LustreEvidence("/lustre/scratch", mounted=True, nids_pinged=1, servers_active=2),
        provides=ALL,
    )
    return replace(ev, **kw)  # type: ignore[arg-type]


def codes(report, status=None):
    return sorted({v.code for v in report.verdicts if status is None or v.status is status})


def test_healthy_node_is_ok(th):
    r = judge_node(healthy(), th, NOW)
    assert r.status is Status.OK, [v.summary for v in r.problems]
    # no mounts required by default; probe-hung, evidence-lost and launch-node-failed come from
    # policy, not checks
    assert set(codes(r)) == CODES - {"evidence", "mount", "probe-hung", "evidence-lost", "launch-node-failed"}


def test_every_check_code_is_unique_and_needs_a_known_fact():
    assert len({c.code for c in CATALOGUE}) == len(CATALOGUE)
    assert all(c.fact in FACTS for c in CATALOGUE)


def test_missing_gpu_fails_count(th):
    r = judge_node(healthy(gpu_count=7), th, NOW)
    assert r.status is Status.FAIL and codes(r, Status.FAIL) == ["gpu-count"]
    v = next(v for v in r.verdicts if v.code == "gpu-count")
    assert v.short_evidence == "7/8 gpus"


def test_xid_79_fails_with_reboot_action(th):
    ev = healthy(xids=[XidEvent(79, gpu=3, time=NOW - 10)])
    r = judge_node(ev, th, NOW)
    (v,) = [v for v in r.verdicts if v.code == "gpu-xid"]
    assert v.status is Status.FAIL and v.gpu == 3 and v.evidence["action"] == "reboot"
    assert v.short_evidence == "xid 79 gpu 3"


def test_xid_dedup_by_window_and_boot(th):
    ev = healthy(
        boot_id="b2",
        xids=[
            XidEvent(48, gpu=1, time=NOW - 5),
            XidEvent(48, gpu=1, time=NOW - 4),
            XidEvent(48, gpu=1, time=NOW - 3, count=2),
            XidEvent(79, gpu=2, time=NOW - 7200),  # outside the window
            XidEvent(74, gpu=4, time=NOW - 5, boot_id="b1"),  # earlier boot
        ],
    )
    (v,) = [v for v in judge_node(ev, th, NOW).verdicts if v.code == "gpu-xid"]
    assert (v.evidence["xid"], v.evidence["count"], v.evidence["last"]) == (48, 4, NOW - 3)


def test_xid_classes_app_errors_warn_benign_ignored_and_site_override():
    th = load_thresholds()
    ev = healthy(xids=[XidEvent(13, gpu=0, time=NOW), XidEvent(45, gpu=0, time=NOW)])
    vs = [v for v in judge_node(ev, th, NOW).verdicts if v.code == "gpu-xid"]
    assert [(v.evidence["xid"], v.status) for v in vs] == [(13, Status.WARN)]
    # an XID missing from NVIDIA's catalogue is fatal: FAIL, and only a reboot clears it
    vs = [
        v
        for v in judge_node(healthy(xids=[XidEvent(999, time=NOW)]), th, NOW).verdicts
        if v.code == "gpu-xid"
    ]
    assert (vs[0].status, vs[0].evidence["action"]) == (Status.FAIL, "reboot")
    assert vs[0].evidence["name"] == "not in NVIDIA's catalogue"
    site = load_thresholds({"xid": {"classes": {"13": "replace"}}})
    vs = [v for v in judge_node(ev, site, NOW).verdicts if v.code == "gpu-xid"]
    assert vs[0].status is Status.FAIL and vs[0].evidence["action"] == "replace"


def test_bad_threshold_overrides_are_config_errors():
    with pytest.raises(ConfigError):
        load_thresholds({"xid": {"classes": {"13": "panic"}}})
    with pytest.raises(ConfigError):
        load_thresholds({"gpu": {"nonsense": 1}})
    with pytest.raises(ConfigError):
        load_thresholds({"throttle": {"thermal": "maybe"}})


@pytest.mark.parametrize(
    ("field", "value", "code", "status"),
    [
        ("ecc_dbe_volatile", 1, "gpu-ecc-dbe", Status.FAIL),
        ("ecc_sbe_per_hour", 5000.0, "gpu-ecc-sbe-rate", Status.WARN),
        ("retired_pages_dbe", 2, "gpu-retired-pages", Status.FAIL),
        ("retired_pages_pending", True, "gpu-retired-pages", Status.WARN),
        ("remap_pending", True, "gpu-row-remap", Status.FAIL),
        ("remap_failure", True, "gpu-row-remap", Status.FAIL),
        ("nvlink_links_down", 2, "gpu-nvlink", Status.FAIL),
        ("nvlink_crc_per_second", 500.0, "gpu-nvlink-crc", Status.WARN),
        ("pcie_width", 8, "gpu-pcie", Status.FAIL),
        ("pcie_gen", 4, "gpu-pcie", Status.FAIL),
        ("thermal_throttle", True, "gpu-throttle", Status.FAIL),
        ("power_throttle", True, "gpu-throttle", Status.WARN),
    ],
)
def test_gpu_faults(th, field, value, code, status):
    ev = healthy()
    ev.gpus[5] = replace(ev.gpus[5], **{field: value})
    r = judge_node(ev, th, NOW)
    bad = [v for v in r.verdicts if v.status is not Status.OK]
    assert [(v.code, v.status, v.gpu) for v in bad] == [(code, status, 5)]


def test_missing_gpu_field_is_unknown_not_ok(th):
    ev = healthy()
    ev.gpus[2] = replace(ev.gpus[2], ecc_dbe_volatile=None)
    r = judge_node(ev, th, NOW)
    assert r.status is Status.UNKNOWN and codes(r, Status.UNKNOWN) == ["gpu-ecc-dbe"]


def test_facts_not_provided_are_skipped(th):
    r = judge_node(healthy(provides=frozenset({"gpu_count"})), th, NOW)
    assert codes(r) == ["gpu-count"]


def test_unreachable_node_is_one_unknown(th):
    ev = Evidence(node="gpu-009", source="prometheus", collected_at=NOW, reachable=False, error="no series")
    r = judge_node(ev, th, NOW)
    assert r.status is Status.UNKNOWN and [v.code for v in r.verdicts] == ["evidence"]


def test_ib_port_down_rate_and_counters(th):
    ev = healthy()
    ev.ib_ports[2] = IbPortEvidence("mlx5_2", 1, "DOWN", "Disabled", 40.0, "InfiniBand", {}, 600.0)
    ev.ib_ports[3] = replace(ev.ib_ports[3], rate_gbps=200.0)
    ev.ib_ports[4] = replace(ev.ib_ports[4], counter_deltas={"link_downed": 2, "symbol_error": 5})
    ev.ib_ports[5] = replace(ev.ib_ports[5], counter_deltas={"link_error_recovery": 9})
    r = judge_node(ev, th, NOW)
    bad = sorted((v.code, v.status.value, v.evidence.get("device")) for v in r.problems)
    assert bad == [
        ("ib-errors", "FAIL", "mlx5_4"),
        ("ib-errors", "WARN", "mlx5_5"),
        ("ib-port", "FAIL", "mlx5_2"),
        ("ib-port", "FAIL", "mlx5_3"),
    ]
    down = next(v for v in r.problems if v.evidence.get("device") == "mlx5_2")
    assert down.short_evidence == "mlx5_2 state DOWN"


def test_a_port_that_is_down_fails_ib_port_only_and_errors_again_once_up(th):
    """One cause, one check: the link_downed a port counts as it goes down is the ib-port FAIL's,
    not a second failure (a fleet-wide port event would be two storms); back up, the counter within
    the window says the link flapped."""
    ev = healthy()
    ev.ib_ports[0] = IbPortEvidence("mlx5_0", 1, "DOWN", "Polling", 400.0, "InfiniBand",
                                    {"link_downed": 1, "symbol_error": 500}, 600.0)
    assert [(v.code, v.status.value) for v in judge_node(ev, th, NOW).problems] == [("ib-port", "FAIL")]
    ev.ib_ports[0] = replace(ev.ib_ports[0], state="ACTIVE", phys_state="LinkUp")
    assert [(v.code, v.status.value) for v in judge_node(ev, th, NOW).problems] == [("ib-errors", "FAIL")]


def test_ib_required_devices_missing(th):
    site = load_thresholds({"ib": {"devices": ["mlx5_0", "mlx5_9"]}})
    r = judge_node(healthy(), site, NOW)
    assert [v.summary for v in r.problems] == ["mlx5_9 missing"]


def test_mounts_and_slurmd():
    th = load_thresholds(
        {"mounts": {"required": [{"path": "/lustre", "fstype": "lustre"}, {"path": "/home"}]}}
    )
    ev = healthy(
        mounts=[MountEvidence("/lustre", "lustre", True, False, "lfs check servers: MDT0000 inactive")],
        slurmd_alive=False,
    )
    r = judge_node(ev, th, NOW)
    assert sorted(v.summary for v in r.problems) == [
        "/home not mounted",
        "/lustre not responding: lfs check servers: MDT0000 inactive",
        "slurmd not running",
    ]


# -- the same checks on evidence built from genuine tool output --------------------------------


def test_genuine_h100_nvidia_smi_gpu_checks(th, real):
    gpus = gpus_from_nvidia_smi(parse_nvidia_smi_q(real("nvidia-smi-q.h100x8.535.183.01.gpud.txt")))
    ev = Evidence(
        "h100",
        "ssh",
        NOW,
        gpu_count=len(gpus),
        gpus=gpus,
        provides=frozenset({"gpu_count", "ecc", "row_remap", "pcie", "throttle"}),
    )
    r = judge_node(ev, th, NOW)
    # The genuine report shows GPU 2 (minor 2) with the hardware power brake asserted: a WARN.
    assert [(v.code, v.status, v.gpu) for v in r.problems] == [("gpu-throttle", Status.WARN, 2)]


def test_genuine_ibstat_some_down(th, real):
    ports = ib_from_ibstat(parse_ibstat(real("ibstat.h100.some_down.gpud.txt")))
    ev = Evidence("h100", "ssh", NOW, ib_ports=ports, provides=frozenset({"ib"}))
    # The ports that are down in this genuine sample are Ethernet (front-end) ports: with the
    # default (fabric = every InfiniBand port) the node is healthy ...
    r = judge_node(ev, th, NOW)
    assert r.status is Status.OK and r.verdicts[0].summary == "8 ports active at 400 Gb/s"
    # ... and a site that lists them as fabric HCAs gets them failed, with every problem named.
    site = load_thresholds({"ib": {"devices": ["mlx5_0", "mlx5_2", "mlx5_7"]}})
    r = judge_node(ev, site, NOW)
    assert sorted(v.summary for v in r.problems) == [
        "mlx5_2/1: state DOWN, phys Disabled, rate 40 < 400, link layer Ethernet",
        "mlx5_7/1: state DOWN, phys Disabled, rate 40 < 400, link layer Ethernet",
    ]


def test_genuine_sysfs_counter_deltas(th, real):
    devs = parse_ib_sysfs(parse_flattened(real("sysfs-class-infiniband.h100.mlx5_0.flattened.gpud.txt")))
    before = {"mlx5_0/1": {k: 0 for k in devs[0].ports[0].counters}}
    ports = ib_from_sysfs(devs, previous=before, window_seconds=600.0)
    assert ports[0].counter_deltas["port_rcv_errors"] == 14
    ev = Evidence("h100", "ssh", NOW, ib_ports=ports, provides=frozenset({"ib", "ib_errors"}))
    r = judge_node(ev, th, NOW)
    # 14 receive errors and 15 buffer overruns: the overruns cross their threshold (10)
    (v,) = r.problems
    assert v.code == "ib-errors" and v.status is Status.FAIL
    assert v.evidence["increase"] == {"excessive_buffer_overrun_errors": 15}


def test_genuine_dmesg_xid_mapped_to_gpu(th, real):
    gpus = [GpuEvidence(index=4, pci_bus_id="00000000:9B:00.0")]
    log = parse_dmesg_xids(real("dmesg.xid119.h100.gpud.log"))
    events = xids_from_dmesg(log, gpus)
    assert {(e.xid, e.gpu) for e in events} == {(119, 4)} and len(events) == 5
    ev = Evidence("h100", "ssh", NOW, xids=events, provides=frozenset({"xid"}))
    (v,) = judge_node(ev, th, NOW).problems
    assert (v.status, v.evidence["xid"], v.evidence["count"], v.evidence["action"]) == (
        Status.FAIL,
        119,
        5,
        "reset_gpu",
    )


def test_dmesg_uptime_stamps_age_out(th, real):
    log = parse_dmesg_xids(real("dmesg.xid_sxid_pcie_lines.imbue.txt"))
    # node up 2397166.99 s: the XIDs are fresh; up a day longer: they are history
    fresh = xids_from_dmesg(log, [], now=NOW, uptime=2397167.0)
    stale = xids_from_dmesg(log, [], now=NOW, uptime=2397167.0 + 86400)
    assert all(NOW - e.time < 1 for e in fresh)
    ev = Evidence("n", "ssh", NOW, xids=stale, provides=frozenset({"xid"}))
    assert judge_node(ev, th, NOW).status is Status.OK
    ev = Evidence("n", "ssh", NOW, xids=fresh, provides=frozenset({"xid"}))
    assert {v.evidence["xid"] for v in judge_node(ev, th, NOW).problems} == {64, 94}


def _xid_verdicts(th, **kw):
    return [v for v in judge_node(healthy(**kw), th, NOW).verdicts if v.code == "gpu-xid"]


def test_xid_with_unknown_boot_unknown_only_when_the_source_says_it_is_no_longer_counted(th):
    old = NOW - 1500
    (v,) = _xid_verdicts(th, xids=[XidEvent(79, gpu=3, time=old, counted_now=False)], xid_mode="count")
    assert v.status is Status.UNKNOWN and "last counted 25 min ago; boot time unknown" in v.summary
    (v,) = _xid_verdicts(th, xids=[XidEvent(79, gpu=3, time=NOW - 3, counted_now=True)], xid_mode="count")
    assert v.status is Status.FAIL
    # the kernel log and the last-value gauge say nothing about counting: unchanged
    (v,) = _xid_verdicts(th, xids=[XidEvent(79, gpu=3, time=old)], xid_mode="kernel-log")
    assert v.status is Status.FAIL
    (v,) = _xid_verdicts(th, xids=[XidEvent(79, gpu=3)], xid_mode="last-value")
    assert v.status is Status.FAIL
    (v,) = _xid_verdicts(th, xids=[XidEvent(13, gpu=3)], xid_mode="last-value")
    assert v.status is Status.UNKNOWN and "may be hidden" in v.summary


def test_xid_no_longer_counted_is_placed_by_a_known_boot(th):
    old = NOW - 1500
    xids = [XidEvent(79, gpu=3, time=old, counted_now=False)]
    (v,) = _xid_verdicts(th, xids=xids, xid_mode="count", boot_time=NOW - 7200)
    assert v.status is Status.FAIL  # this boot's
    (v,) = _xid_verdicts(th, xids=xids, xid_mode="count", boot_time=NOW - 600)
    assert v.status is Status.OK  # an earlier boot's: history
    # a boot id without a start time (another source's boot): placed when the event carries one
    xids = [XidEvent(79, gpu=3, time=old, counted_now=False, boot_id="b2")]
    (v,) = _xid_verdicts(th, xids=xids, xid_mode="count", boot_id="b2")
    assert v.status is Status.FAIL


def test_a_current_count_of_an_xid_outweighs_an_unplaced_one(th):
    xids = [
        XidEvent(79, gpu=3, time=NOW - 1500, counted_now=False),
        XidEvent(79, gpu=3, time=NOW - 3, counted_now=True),
        XidEvent(13, gpu=1, time=NOW - 1500, counted_now=False),  # a light class stays WARN
    ]
    vs = _xid_verdicts(th, xids=xids, xid_mode="count")
    assert [(v.gpu, v.status, v.evidence["count"]) for v in vs] == [(1, Status.WARN, 1), (3, Status.FAIL, 1)]
