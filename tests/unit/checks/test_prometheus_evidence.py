"""build_evidence on query results shaped from the emulator's own series.

``results`` projects what the emulated exporters serve (opsctl.hwsim.metrics, with the sim's
target labels ``node`` and ``instance``) through each instant query's ``max by (...)`` the way
Prometheus answers it; counter increases and the XID window history, which need a time series, are
given explicitly. The real-Prometheus side is tests/integration/health/test_prometheus_source.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from opsctl.checks import judge, load_thresholds
from opsctl.checks.settings import HealthSection
from opsctl.evidence.prometheus import (
    BOOT_ID_METRIC,
    COUNTERS,
    NONZERO_GAUGES,
    REASON_GAUGES,
    RECOVERY_GAUGES,
    VALUE_GAUGES,
    XID_COUNT,
    PrometheusSource,
    build_evidence,
)
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.metrics import families
from opsctl.hwsim.state import NodeHardware, make_node

NOW = 1_796_000_000.0
NODES = ["gpu-001", "gpu-002", "gpu-003"]
Series = dict[str, Any]


def _by(query: str, key: str) -> list[str]:
    """The label list of a query's outermost ``max by (...)`` / ``count by (...)``."""
    match = re.match(r"(?:max|count) by \(([^)]*)\)", query)
    assert match, f"{key}: {query}"
    return [label.strip() for label in match.group(1).split(",")]


def results(
    states: list[NodeHardware],
    *,
    counters: list[Series] | None = None,
    xid_window: dict[tuple[str, int, int], tuple[int, float]] | None = None,
    drop: dict[str, set[str]] | None = None,
) -> dict[str, list[Series]]:
    """The answers of PrometheusSource.queries() for these nodes at NOW. ``xid_window``: (node, gpu,
    xid) -> (highest count, last time counted) within the XID window; ``drop``: node -> families
    its exporter does not serve (another counters file)."""
    samples: list[tuple[dict[str, str], float]] = []
    for i, st in enumerate(states):
        target = {"node": st.node, "instance": f"127.0.0.1:{9400 + i}", "job": "hwsim"}
        for fam in families(st, now=NOW):
            if fam.name in (drop or {}).get(st.node, set()):
                continue
            for s in fam.samples:
                samples.append(({"__name__": fam.name, **s.labels, **target}, s.value))
    return answers(samples, counters=counters, xid_window=xid_window)


def answers(
    samples: list[tuple[dict[str, str], float]],
    *,
    counters: list[Series] | None = None,
    xid_window: dict[tuple[str, int, int], tuple[int, float]] | None = None,
) -> dict[str, list[Series]]:
    """Each instant query's answer over these stored samples (labels with ``__name__``, value),
    projected through its ``max by (...)`` as Prometheus answers it."""
    qs = PrometheusSource("http://unused").queries()

    def project(labels: dict[str, str], keep: list[str]) -> dict[str, str]:
        return {k: v for k, v in labels.items() if k in keep}

    def answer(key: str, pick: Any, value: Any = None) -> list[Series]:
        keep = _by(qs[key], key)
        merged: dict[tuple[tuple[str, str], ...], float] = {}
        for labels, v in samples:
            if pick(labels, v):
                k = tuple(sorted(project(labels, keep).items()))
                merged[k] = max(merged.get(k, float("-inf")), v if value is None else value(labels, v))
        return [{"metric": dict(k), "value": [NOW, str(v)]} for k, v in merged.items()]

    every = {*NONZERO_GAUGES, *COUNTERS, XID_COUNT}
    nonzero = set(NONZERO_GAUGES) - set(REASON_GAUGES)
    present: dict[tuple[tuple[str, str], ...], int] = {}
    for labels, _ in samples:
        if labels["__name__"] in every:
            k = tuple(sorted(project(labels, _by(qs["present"], "present")).items()))
            present[k] = present.get(k, 0) + 1
    out = {
        "fresh": answer(
            "fresh", lambda lb, v: lb["__name__"] == "DCGM_FI_DEV_GPU_TEMP", lambda lb, v: NOW - 2
        ),
        "present": [{"metric": dict(k), "value": [NOW, str(n)]} for k, n in present.items()],
        "nonzero": answer("nonzero", lambda lb, v: lb["__name__"] in nonzero and v != 0),
        "reasons": answer("reasons", lambda lb, v: lb["__name__"] in REASON_GAUGES and v >= 0x40),
        "values": answer("values", lambda lb, v: lb["__name__"] in VALUE_GAUGES),
        "boot_ids": answer("boot_ids", lambda lb, v: lb["__name__"] == BOOT_ID_METRIC),
        "counters": counters or [],
        "xid_counts": [],
        "xid_last": [],
    }
    for (node, gpu, xid), (count, last) in (xid_window or {}).items():
        labels = {"node": node, "Hostname": node, "gpu": str(gpu), "device": f"nvidia{gpu}", "xid": str(xid)}
        out["xid_counts"].append({"metric": labels, "value": [NOW, str(count)]})
        out["xid_last"].append({"metric": labels, "value": [NOW, str(last)]})
    return out


def fleet(**faults: str) -> list[NodeHardware]:
    states = []
    for node in NODES:
        st = make_node(node, now=NOW)
        for spec in filter(None, faults.get(node.replace("-", "_"), "").split(";")):
            apply_fault(st, spec)
        states.append(st)
    return states


def evidence(res: dict[str, list[Series]], nodes: list[str] = NODES) -> dict[str, Any]:
    return {ev.node: ev for ev in build_evidence(nodes, res, NOW, 30.0, 600)}


def verdicts(res: dict[str, list[Series]]) -> dict[str, tuple[str, list[str]]]:
    reports = judge(build_evidence(NODES, res, NOW, 30.0, 600), load_thresholds(), NOW)
    return {
        r.node: (r.status.value, sorted({f"{v.code}:{v.status.value}" for v in r.problems})) for r in reports
    }


def test_a_healthy_fleet_reports_every_family_with_boot_identity_and_recovery_action() -> None:
    states = fleet()
    evs = evidence(results(states))
    ev = evs["gpu-002"]
    assert ev.reachable and ev.gpu_count == 8 and ev.xid_mode == "count" and ev.xids == []
    assert {"gpu_count", "xid", "ecc", "row_remap", "pcie", "throttle", "ib", "ib_errors"} <= ev.provides
    # the kernel's boot_id, from the node_exporter role's textfile metric
    assert ev.boot_time == float(int(states[1].boot_time))
    assert (ev.boot_id, ev.boot_kind) == (states[1].boot_id, "kernel")
    assert [g.uuid for g in ev.gpus] == [g.uuid for g in states[1].gpus]  # UUIDs carried for latching
    assert {g.recovery_action for g in ev.gpus} == {"none"}
    assert {(g.remap_pending, g.remap_failure, g.ecc_dbe_volatile) for g in ev.gpus} == {(False, False, 0)}
    assert len(ev.ib_ports) == 8 and all(p.state == "ACTIVE" for p in ev.ib_ports)
    assert {v for p in ev.ib_ports for v in (p.counter_deltas or {"unknown": None}).values()} == {0}
    assert list(verdicts(results(states)).values()) == [("OK", [])] * 3


def test_node_exporter_down_on_one_node_is_unknown_for_its_families_only() -> None:
    res = results(fleet(gpu_002="exporter_down=node"))
    ev = evidence(res)["gpu-002"]
    # its GPU facts are there; what node_exporter gives is unknown, never "no port" or "no boot"
    assert ev.reachable and ev.gpu_count == 8 and ev.xids == []
    assert (ev.ib_ports, ev.boot_id, ev.boot_time) == (None, "", None)
    assert evidence(res)["gpu-001"].ib_ports is not None
    assert verdicts(res) == {
        "gpu-001": ("OK", []),
        "gpu-002": ("UNKNOWN", ["ib-errors:UNKNOWN", "ib-port:UNKNOWN"]),
        "gpu-003": ("OK", []),
    }


def test_a_family_one_node_lacks_is_none_there_and_known_elsewhere() -> None:
    # gpu-003's dcgm-exporter runs another counters file: no row-remap-pending, no recovery action
    drop = {"gpu-003": {"DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"}}
    evs = evidence(results(fleet(), drop=drop))
    assert {(g.remap_pending, g.recovery_action) for g in evs["gpu-003"].gpus} == {(None, None)}
    assert {(g.remap_pending, g.recovery_action) for g in evs["gpu-001"].gpus} == {(False, "none")}
    assert {g.remap_failure for g in evs["gpu-003"].gpus} == {False}  # the failure flag still answers


def test_ib_counters_the_fleet_has_but_one_node_lacks_are_unknown_not_zero() -> None:
    drop = {"gpu-001": {f.name for f in families(make_node("gpu-001", now=NOW)) if f.name.endswith("_total")}}
    evs = evidence(results(fleet(), drop=drop))
    assert all(p.counter_deltas is None for p in evs["gpu-001"].ib_ports)
    assert all(p.counter_deltas and set(p.counter_deltas.values()) == {0} for p in evs["gpu-002"].ib_ports)


def test_xids_come_from_the_policy_window_with_their_last_counted_time() -> None:
    # XID 79 on gpu-001 GPU 3 was last counted 20 minutes ago: out of dcgm-exporter's 5-minute
    # window (its instant count is 0 again) but inside the 1-hour XID policy window
    res = results(
        fleet(), xid_window={("gpu-001", 3, 79): (1, NOW - 1200), ("gpu-002", 0, 13): (4, NOW - 30)}
    )
    evs = evidence(res)
    (e,) = evs["gpu-001"].xids
    assert (e.xid, e.gpu, e.count, e.time) == (79, 3, 1, NOW - 1200)
    assert evs["gpu-001"].xid_mode == "count"
    assert verdicts(res)["gpu-001"] == ("FAIL", ["gpu-xid:FAIL"])
    assert verdicts(res)["gpu-002"] == ("WARN", ["gpu-xid:WARN"])  # an application XID, 4 in a window


def test_counted_xids_from_before_the_boot_are_history() -> None:
    states = fleet()
    states[0].boot_time = boot = NOW - 600  # rebooted 10 minutes ago: both XIDs are in the window
    window = {("gpu-001", 3, 79): (1, boot - 5), ("gpu-001", 1, 48): (1, boot + 60)}
    res = results(states, xid_window=window)
    ev = evidence(res)["gpu-001"]
    assert [(e.xid, e.boot_id) for e in ev.xids] == [(48, ev.boot_id), (79, f"before-{ev.boot_id}")]
    # the 79 was last counted before this boot began: only the 48 of this boot is current
    assert verdicts(res)["gpu-001"] == ("FAIL", ["gpu-xid:FAIL"])
    (v,) = [v for r in judge([ev], load_thresholds(), NOW) for v in r.problems]
    assert v.evidence["xid"] == 48


def test_hardware_slowdown_is_read_and_idle_reasons_are_not_a_fault() -> None:
    res = results(fleet(gpu_001="thermal,gpu=6;ecc_dbe,gpu=6"))
    assert [s["metric"]["gpu"] for s in res["reasons"]] == ["6"]  # idle (0x1) is not fetched
    ev = evidence(res)["gpu-001"]
    assert [g.index for g in ev.gpus if g.thermal_throttle] == [6] and ev.gpus[6].ecc_dbe_volatile == 1
    assert {g.thermal_throttle for g in evidence(res)["gpu-002"].gpus} == {False}


def test_without_the_count_field_xids_are_last_value_only() -> None:
    drop = {n: {XID_COUNT} for n in NODES}
    res = results(fleet(gpu_001="xid=79,gpu=3;xid=45,gpu=3"), drop=drop)
    ev = evidence(res)["gpu-001"]
    assert ev.xid_mode == "last-value"
    # the harmless 45 hides the fatal 79: why remediation refuses to act in this mode
    assert [(e.xid, e.gpu, e.time) for e in ev.xids] == [(45, 3, None)]
    assert evidence(res)["gpu-002"].xids == []


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("xid=79,gpu=3", "reboot"),
        ("ecc_dbe,gpu=3", "reset"),
        ("nvlink_down,gpu=3", "reset"),
        ("xid=13,gpu=3", "none"),
    ],
)
def test_recovery_action_follows_the_driver(spec: str, want: str) -> None:
    ev = evidence(results(fleet(gpu_001=spec)))["gpu-001"]
    assert ev.gpus[3].recovery_action == want and ev.gpus[2].recovery_action == "none"


def test_a_recovery_action_scraped_before_the_boot_is_unknown_not_the_new_boots() -> None:
    """Right after a fast reboot node_exporter can have scraped the new boot while dcgm-exporter's
    latest sample (2 s old here) is still of the boot before: what that driver asked for is no fault
    of this boot."""
    states = fleet(gpu_001="xid=79,gpu=3")
    states[0].boot_time = NOW - 600
    assert evidence(results(states))["gpu-001"].gpus[3].recovery_action == "reboot"
    states[0].boot_time = NOW - 1  # booted after the GPUs' last scrape
    ev = evidence(results(states))["gpu-001"]
    assert {(g.recovery_action, g.reset_required) for g in ev.gpus} == {(None, None)}
    assert "gpu-recovery:FAIL" not in verdicts(results(states))["gpu-001"][1]
    # the XID that scrape counted is of the boot before too, whatever its last-counted time says (a
    # subquery step that ends after the boot)
    res = results(states, xid_window={("gpu-001", 3, 79): (1, NOW - 0.5)})
    (e,) = evidence(res)["gpu-001"].xids
    assert e.boot_id.startswith("before-") and e.counted_now is False
    assert "gpu-xid:FAIL" not in verdicts(res)["gpu-001"][1]
    # a boot time after the query is the node's clock stepped ahead, not a boot: nothing forgotten
    states[0].boot_time = NOW + 60
    assert evidence(results(states))["gpu-001"].gpus[3].recovery_action == "reboot"


def test_recovery_action_under_the_dcgm_4_6_name_and_values_newer_than_the_enum() -> None:
    res = results(fleet())
    for s in res["nonzero"] + res["present"]:
        if s["metric"].get("__name__") == "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION":
            s["metric"]["__name__"] = "DCGM_FI_DEV_GPU_RECOVERY_ACTION"
    res["nonzero"] += [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_RECOVERY_ACTION", "node": "gpu-001", "gpu": str(g)},
         "value": [NOW, str(v)]}
        for g, v in ((1, 3), (2, 4), (5, 7))
    ]  # fmt: skip
    actions = [g.recovery_action for g in evidence(res)["gpu-001"].gpus]
    assert actions == ["none", "drain_p2p", "drain_and_reset", "none", "none", "reboot", "none", "none"]


def test_a_reboot_is_a_new_boot_id_and_a_gpu_reset_is_not() -> None:
    states = fleet(gpu_001="ecc_dbe,gpu=2")
    before = evidence(results(states))["gpu-001"]
    apply_fault(states[0], "gpu_reset,gpu=2")
    reset = evidence(results(states))["gpu-001"]
    assert reset.boot_id == before.boot_id and reset.gpus[2].recovery_action == "none"
    assert before.gpus[2].recovery_action == "reset" and before.gpus[2].remap_pending is True
    apply_fault(states[0], "reboot")
    assert evidence(results(states))["gpu-001"].boot_id != before.boot_id


def test_a_clock_step_moves_the_boot_time_and_not_the_kernel_boot_id() -> None:
    states = fleet()
    before = evidence(results(states))["gpu-001"]
    apply_fault(states[0], "clock_step=30")
    stepped = evidence(results(states))["gpu-001"]
    assert (stepped.boot_id, stepped.boot_kind) == (before.boot_id, "kernel")
    assert before.boot_time is not None and stepped.boot_time == before.boot_time + 30
    apply_fault(states[0], "reboot")
    rebooted = evidence(results(states))["gpu-001"]
    assert rebooted.boot_kind == "kernel" and rebooted.boot_id not in ("", before.boot_id)


def test_without_the_boot_id_metric_the_boot_id_is_the_boot_time() -> None:
    """A node whose node_exporter lacks the role's boot id file (the role not yet applied): the
    boot time, said to be of the "btime" kind (a clock step moves it)."""
    states = fleet()
    ev = evidence(results(states, drop={"gpu-001": {BOOT_ID_METRIC}}))["gpu-001"]
    assert (ev.boot_id, ev.boot_kind) == (f"boot-{int(states[0].boot_time)}", "btime")


def test_stale_and_absent_dcgm_series_leave_the_node_unknown() -> None:
    res = results(fleet(gpu_003="exporter_down=dcgm"))
    evs = evidence(res)
    assert not evs["gpu-003"].reachable and "no dcgm-exporter series" in evs["gpu-003"].error
    res["fresh"] = [{**s, "value": [NOW, str(NOW - 120)]} for s in res["fresh"]]
    assert "stale" in evidence(res)["gpu-001"].error
    got = verdicts(results(fleet(gpu_003="exporter_down=dcgm")))["gpu-003"]
    assert got == ("UNKNOWN", ["evidence:UNKNOWN"])


def test_the_xid_queries_span_the_policy_window() -> None:
    qs = PrometheusSource("http://unused", xid_window_seconds=7200, xid_step_seconds=5).queries()
    counted = 'DCGM_EXP_XID_ERRORS_COUNT{xid!=""}'
    assert f"max_over_time({counted}[7200s]) > 0" in qs["xid_counts"]
    last_counted = f"(timestamp({counted}) and {counted} > 0)[7200s:5s]"
    assert last_counted in qs["xid_last"]
    assert {"UUID", "pci_bus_id", "modelName"} <= set(_by(qs["fresh"], "fresh"))


def test_an_xid_no_longer_counted_on_a_node_without_boot_time_is_unknown_not_failed() -> None:
    # A Prometheus restart: gpu-001's dcgm-exporter target is scraped, its node_exporter not yet.
    # XID 79 was last counted 25 minutes ago, inside the 1-hour window: it may be from before the
    # reboot that healed the node, or from this boot, so neither drain nor call the node healthy.
    res = results(fleet(gpu_001="exporter_down=node"), xid_window={("gpu-001", 3, 79): (1, NOW - 1500)})
    unknown = ["gpu-xid:UNKNOWN", "ib-errors:UNKNOWN", "ib-port:UNKNOWN"]
    assert verdicts(res)["gpu-001"] == ("UNKNOWN", unknown)  # was FAIL: a healthy node drained
    ev = evidence(res)["gpu-001"]
    assert (ev.boot_time, ev.boot_id) == (None, "")
    assert [(e.xid, e.counted_now) for e in ev.xids] == [(79, False)]
    (v,) = [v for r in judge([ev], load_thresholds(), NOW) for v in r.problems if v.code == "gpu-xid"]
    assert v.gpu == 3 and "last counted 25 min ago" in v.summary and "boot time unknown" in v.summary
    assert "action" in v.evidence and v.evidence["xid"] == 79  # what a later FAIL would latch


def test_an_xid_counted_in_the_latest_scrape_fails_without_boot_time() -> None:
    # dcgm-exporter's counts restart with the node: a count in its latest scrape is of this boot
    res = results(fleet(gpu_001="exporter_down=node"), xid_window={("gpu-001", 3, 79): (1, NOW - 2)})
    ev = evidence(res)["gpu-001"]
    assert ev.boot_time is None and [e.counted_now for e in ev.xids] == [True]
    (v,) = [v for r in judge([ev], load_thresholds(), NOW) for v in r.problems if v.code == "gpu-xid"]
    assert (v.status.value, v.evidence["action"]) == ("FAIL", "reboot")


@pytest.mark.parametrize(("last", "counted_now"), [(-2 - 35, True), (-2 - 36, False), (None, True)])
def test_counted_now_allows_the_subquery_step_and_a_scrape_interval(
    last: float | None, counted_now: bool
) -> None:
    # the node's freshest sample is NOW - 2; stale_after 30 s and the 5 s step bound the lag of the
    # last-counted time behind it. No last-counted time: the count saw it after the last step.
    res = results(fleet(gpu_001="exporter_down=node"), xid_window={("gpu-001", 3, 79): (1, 0.0)})
    if last is None:
        res["xid_last"] = []
    else:
        res["xid_last"][0]["value"][1] = str(NOW + last)
    (e,) = evidence(res)["gpu-001"].xids
    assert e.counted_now is counted_now


def test_an_xid_of_this_boot_no_longer_counted_still_fails_when_the_boot_is_known() -> None:
    states = fleet()
    states[0].boot_time = NOW - 7200  # booted 2 hours ago; XID 79 last counted 25 minutes ago
    res = results(states, xid_window={("gpu-001", 3, 79): (1, NOW - 1500)})
    assert evidence(res)["gpu-001"].xids[0].counted_now is False
    assert verdicts(res)["gpu-001"] == ("FAIL", ["gpu-xid:FAIL"])


NO_RECOVERY = {node: set(RECOVERY_GAUGES) for node in NODES}  # a DCGM before 4.5


def test_a_fatal_xid_only_the_last_xid_gauge_shows_fails() -> None:
    # XID 79 raised while Prometheus was down for longer than dcgm-exporter's 5-minute window: no
    # count of it was ever stored (no xid_window), but the last-XID gauge keeps it until the driver
    # reloads. Was OK: a GPU off the bus left in service (bench/rehearsal.py prometheus-gap). The
    # pinned DCGM (3.3) serves no recovery action that would say so.
    res = results(fleet(gpu_001="xid=79,gpu=3"), drop=NO_RECOVERY)
    ev = evidence(res)["gpu-001"]
    assert ev.xid_mode == "count"
    assert [(e.xid, e.gpu, e.uncounted) for e in ev.xids] == [(79, 3, True)]
    assert verdicts(res)["gpu-001"] == ("FAIL", ["gpu-xid:FAIL"])
    (v,) = [v for r in judge([ev], load_thresholds(), NOW) for v in r.problems]
    assert (v.gpu, v.evidence["xid"], v.evidence["action"]) == (3, 79, "reboot")
    assert "last-XID gauge" in v.summary


def test_the_last_xid_gauge_adds_only_uncounted_xids_its_value_outlives_until_their_fix() -> None:
    # gpu-001: counted, the count decides (one event); gpu-002: an application XID (13) and
    # gpu-003: a reset-class one (48, whose GPU reset may leave the gauge) from the gauge alone are
    # not judged; a reboot sets the gauge back to 0
    res = results(
        fleet(gpu_001="xid=79,gpu=3", gpu_002="xid=13,gpu=1", gpu_003="xid=48,gpu=2;xid=79,gpu=5;reboot"),
        xid_window={("gpu-001", 3, 79): (1, NOW - 30)},
        drop=NO_RECOVERY,
    )
    evs = evidence(res)
    assert [(e.xid, e.uncounted) for e in evs["gpu-001"].xids] == [(79, False)]
    assert [(e.xid, e.uncounted) for e in evs["gpu-002"].xids] == [(13, True)]
    assert evs["gpu-003"].xids == []
    got = verdicts(res)
    assert got["gpu-001"] == ("FAIL", ["gpu-xid:FAIL"])
    assert "gpu-xid:WARN" not in got["gpu-002"][1] and "gpu-xid:FAIL" not in got["gpu-002"][1]
    res = results(fleet(gpu_003="xid=48,gpu=2"), drop=NO_RECOVERY)
    assert [(e.xid, e.uncounted) for e in evidence(res)["gpu-003"].xids] == [(48, True)]
    assert not any(v.code == "gpu-xid" for r in judge(build_evidence(NODES, res, NOW, 30.0, 600),
                                                          load_thresholds(), NOW) for v in r.problems)


def test_transmit_discards_are_read_under_node_exporters_name() -> None:
    # node_exporter's name (node_infiniband_port_discards_transmitted_total), as the emulator serves
    # it: present on every node and, where it grew, read into the port's sysfs counter name
    st = make_node("gpu-002", now=NOW)
    served = {f.name for f in families(st, now=NOW)}
    (name,) = [n for n, sysfs in COUNTERS.items() if sysfs == "port_xmit_discards"]
    assert name in served
    grew = {"counter": name, "node": "gpu-002", "device": "mlx5_3", "port": "1"}
    evs = evidence(results(fleet(), counters=[{"metric": grew, "value": [NOW, "1500"]}]))
    (port,) = [p for p in evs["gpu-002"].ib_ports if p.device == "mlx5_3"]
    assert port.counter_deltas and port.counter_deltas["port_xmit_discards"] == 1500
    others = evs["gpu-001"].ib_ports
    assert all(p.counter_deltas and p.counter_deltas["port_xmit_discards"] == 0 for p in others)


# The fabric HCAs of a node built from the genuine H100 sample (the inventory's ib_fabric_hcas).
H100_FABRIC = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def _h100_ib_port(*faults: str, devices: list[str] | None = H100_FABRIC) -> list[tuple[str, str]]:
    node = make_node("gpu-002", now=NOW, hca_layout="h100-ndr8-eth4")
    for spec in faults:
        apply_fault(node, spec)
    (ev,) = build_evidence(["gpu-002"], results([node]), NOW, 30.0, 600)
    th = HealthSection(ib_devices=devices).load_thresholds()
    verdicts = judge([ev], th, NOW)[0].verdicts
    return sorted((v.status.value, v.summary) for v in verdicts if v.code == "ib-port")


def test_a_node_with_ethernet_ports_beside_its_fabric_reads_ok_when_the_fabric_is_healthy() -> None:
    # node_exporter serves the Ethernet ports (one up at 100 Gb/s, three down) as node_infiniband_*
    # with no link layer; the inventory's fabric HCAs decide which ports are judged.
    assert _h100_ib_port() == [("OK", "8 ports active at 400 Gb/s")]


def test_a_fabric_port_down_beside_ethernet_ports_fails_and_names_only_it() -> None:
    got = _h100_ib_port("ib_down=mlx5_9")
    assert [s for s, _ in got] == ["FAIL"] and got[0][1].startswith("mlx5_9/1: state DOWN")
    # an Ethernet port going down is not the fabric's business
    assert _h100_ib_port("ib_down=mlx5_1") == [("OK", "8 ports active at 400 Gb/s")]


# -- XID 154 and the recovery action, from a dcgm-exporter payload -----------------------------
# An H200 node's scrape as dcgm-exporter 4.5.3-4.8.2 serves it with the dcgm role's counters file
# for DCGM 4.5: the label set of the genuine scrape (tests/fixtures/real-world/
# dcgm-exporter.metrics.h100-mig.excerpt.issue512.prom, without its MIG and Kubernetes labels and
# the DCGM_FI_DRIVER_VERSION label row the role's file does not have), the XID count's labels of
# dcgm-exporter PR #239 (window_size_in_ms, xid) and field 1523 under its DCGM 4.5 name
# (dcgm_fields.DCGM-v4.5.3.txt), whose values are nvmlDeviceGpuRecoveryAction_t (DCGM's NVML
# header: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).
H200_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
RECOVERY_45 = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"


def h200_scrape(node: str, xid154_gpu: int, recovery: dict[int, int] | None, name: str = RECOVERY_45) -> str:
    """The payload: XID 154 counted on ``xid154_gpu`` (and its last XID), the recovery action of
    each GPU (0 where ``recovery`` does not say), or no recovery-action family (``None``)."""

    def ids(g: int) -> str:
        return (
            f'gpu="{g}",UUID="GPU-3f7a1c{g}2-8d4e-5b6f-a9c1-0e2d4f6a8b{g}c",pci_bus_id="00000000:'
            f'{H200_BUSES[g]}:00.0",device="nvidia{g}",modelName="NVIDIA H200",Hostname="{node}"'
        )

    lines = [
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU die temperature in C",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        *(f"DCGM_FI_DEV_GPU_TEMP{{{ids(g)}}} {31 + g}" for g in range(8)),
        "# HELP DCGM_FI_DEV_XID_ERRORS last Xid seen",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        *(f"DCGM_FI_DEV_XID_ERRORS{{{ids(g)}}} {154 if g == xid154_gpu else 0}" for g in range(8)),
        "# HELP DCGM_EXP_XID_ERRORS_COUNT Xids counted within the exporter window",
        "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge",
        *(
            f'DCGM_EXP_XID_ERRORS_COUNT{{{ids(g)},window_size_in_ms="300000",xid="154"}} 1'
            if g == xid154_gpu
            else f'DCGM_EXP_XID_ERRORS_COUNT{{{ids(g)},window_size_in_ms="300000"}} 0'
            for g in range(8)
        ),
    ]
    if recovery is not None:
        lines += [
            f"# HELP {name} recovery action the driver asks for",
            f"# TYPE {name} gauge",
            *(f"{name}{{{ids(g)}}} {recovery.get(g, 0)}" for g in range(8)),
        ]
    return "\n".join(lines) + "\n"


def scraped(text: str, node: str) -> dict[str, list[Series]]:
    """The queries' answers once Prometheus has scraped ``text`` from ``node``'s exporter (the
    prometheus role sets ``instance`` to the node's name); the XID window holds the payload's counts,
    last counted in that scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    target = {"instance": node, "job": "dcgm-exporter"}
    samples = [
        ({"__name__": s.name, **s.labels, **target}, float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]
    window = {
        (node, int(lb["gpu"]), int(lb["xid"])): (int(v), NOW - 2)
        for lb, v in samples
        if lb["__name__"] == XID_COUNT and lb.get("xid") and v > 0
    }
    return answers(samples, xid_window=window)


def judged(res: dict[str, list[Series]], node: str = "gpu-001") -> dict[str, list[Any]]:
    (report,) = judge(build_evidence([node], res, NOW, 30.0, 600), load_thresholds(), NOW)
    out: dict[str, list[Any]] = {}
    for v in report.verdicts:
        out.setdefault(v.code, []).append(v)
    return out


def test_xid_154_over_prometheus_takes_the_class_of_the_recovery_action_the_exporter_serves() -> None:
    res = scraped(h200_scrape("gpu-001", 5, {5: 2}), "gpu-001")  # 0x2: node reboot
    (ev,) = build_evidence(["gpu-001"], res, NOW, 30.0, 600)
    assert "recovery" in ev.provides and ev.xid_mode == "count"
    assert [g.recovery_action for g in ev.gpus] == ["none"] * 5 + ["reboot"] + ["none"] * 2
    verdicts = judged(res)
    (xid,) = verdicts["gpu-xid"]
    assert (xid.status.value, xid.gpu, xid.evidence["xid"]) == ("FAIL", 5, 154)
    assert xid.evidence["action"] == "reboot"
    assert xid.evidence["class_from"] == "recovery_action"
    assert xid.evidence["recovery_from"] == f"{RECOVERY_45}=2"
    assert f"{RECOVERY_45}=2" in xid.summary and "reboot" in xid.summary
    # and the recovery check runs on this source as on the SSH one: the driver's own action
    (rec,) = verdicts["gpu-recovery"]
    assert (rec.status.value, rec.gpu, rec.evidence["action"], rec.evidence["recovery"]) == (
        "FAIL",
        5,
        "reboot",
        "reboot",
    )


def test_xid_154_over_prometheus_without_the_recovery_series_takes_the_catalogues_class_and_says_so() -> None:
    res = scraped(h200_scrape("gpu-001", 5, None), "gpu-001")
    (ev,) = build_evidence(["gpu-001"], res, NOW, 30.0, 600)
    assert "recovery" not in ev.provides and {g.recovery_action for g in ev.gpus} == {None}
    verdicts = judged(res)
    (xid,) = verdicts["gpu-xid"]
    assert (xid.status.value, xid.gpu, xid.evidence["action"]) == ("FAIL", 5, "reset_gpu")
    assert xid.evidence["class_from"] == "catalogue" and "recovery_from" not in xid.evidence
    assert "catalogue" in xid.summary and "no recovery action" in xid.summary
    assert "gpu-recovery" not in verdicts  # the source does not provide it: skipped, not OK


@pytest.mark.parametrize(
    ("value", "status", "cls"),
    [
        (1, "FAIL", "reset_gpu"),  # GPU reset
        (3, "WARN", "restart_app"),  # drain P2P: stop the peer-to-peer processes, ask again
        (4, "FAIL", "reset_gpu"),  # drain and reset
        (7, "FAIL", "reboot"),  # newer than the enum DCGM 4.5 ships: only a new boot is sure
    ],
)
def test_xid_154_follows_each_recovery_action_value_under_either_dcgm_name(
    value: int, status: str, cls: str
) -> None:
    for name in (RECOVERY_45, "DCGM_FI_DEV_GPU_RECOVERY_ACTION"):  # 4.6 renamed field 1523
        (xid,) = judged(scraped(h200_scrape("gpu-001", 2, {2: value}, name), "gpu-001"))["gpu-xid"]
        assert (xid.status.value, xid.gpu, xid.evidence["action"]) == (status, 2, cls), name
        assert xid.evidence["recovery_from"] == f"{name}={value}"


def test_xid_154_whose_gpu_the_driver_no_longer_asks_anything_of_is_not_a_fault() -> None:
    # counted in the window, but the action went back to none (the GPU was reset): as the message
    # "changed from 0x1 (GPU Reset Required) to 0x0 (None)" would say
    verdicts = judged(scraped(h200_scrape("gpu-001", 5, {}), "gpu-001"))
    assert [v.status.value for v in verdicts["gpu-xid"]] == ["OK"]
    assert [v.status.value for v in verdicts["gpu-recovery"]] == ["OK"]


def test_a_node_of_the_fleet_whose_exporter_lacks_the_series_falls_back_and_is_unknown_for_recovery() -> None:
    res = scraped(h200_scrape("gpu-001", 5, {5: 2}), "gpu-001")
    other = scraped(h200_scrape("gpu-002", 5, None), "gpu-002")
    both = {k: res[k] + other[k] for k in res}
    evs = {ev.node: ev for ev in build_evidence(["gpu-001", "gpu-002"], both, NOW, 30.0, 600)}
    assert "recovery" in evs["gpu-002"].provides  # the fleet provides it ...
    reports = {r.node: r for r in judge(list(evs.values()), load_thresholds(), NOW)}
    lacking = {v.code: v for v in reports["gpu-002"].verdicts}
    assert lacking["gpu-recovery"].status.value == "UNKNOWN"  # ... this node's exporter does not
    assert (lacking["gpu-xid"].evidence["action"], lacking["gpu-xid"].evidence["class_from"]) == (
        "reset_gpu",
        "catalogue",
    )
    assert {v.code: v for v in reports["gpu-001"].verdicts}["gpu-xid"].evidence["action"] == "reboot"


def dcgm_up(states: list[NodeHardware]) -> list[Series]:
    """The "dcgm_up" answer: the last scrape time of each node whose dcgm-exporter target is up."""
    return [{"metric": {"instance": st.node}, "value": [NOW, str(NOW - 2)]} for st in states
            if st.dcgm_exporter_up]


def test_an_exporter_up_with_zero_gpu_series_is_a_gpu_count_failure_not_unknown() -> None:
    lost = ";".join(f"gpu_missing,gpu={i}" for i in range(8))  # NVML lost every GPU; the exporter runs
    states = fleet(gpu_002=lost, gpu_003="exporter_down=dcgm")
    res = results(states) | {"dcgm_up": dcgm_up(states)}
    ev = evidence(res)["gpu-002"]
    assert ev.reachable and ev.gpu_count == 0 and ev.gpus == []
    # the node's boot as it reads with its GPUs, so a reboot is provable against a latch of either
    assert ev.boot_id and ev.boot_id == evidence(results(fleet()))["gpu-002"].boot_id
    got = verdicts(res)
    assert got["gpu-002"][0] == "FAIL" and "gpu-count:FAIL" in got["gpu-002"][1]
    (r,) = [r for r in judge(build_evidence(NODES, res, NOW, 30.0, 600), load_thresholds(), NOW)
            if r.node == "gpu-002"]
    (v,) = [v for v in r.verdicts if v.code == "gpu-count"]
    assert v.summary == "0 of 8 GPUs visible"
    # an exporter that is down (up 0, so not in the answer) leaves its node UNKNOWN, as before
    assert got["gpu-003"] == ("UNKNOWN", ["evidence:UNKNOWN"])
    # an up sample older than stale_after is not "up now"
    res["dcgm_up"] = [{**s, "value": [NOW, str(NOW - 120)]} for s in res["dcgm_up"]]
    assert not evidence(res)["gpu-002"].reachable


def test_the_exporter_up_query_asks_for_the_dcgm_exporter_job() -> None:
    q = PrometheusSource("http://unused").queries()["dcgm_up"]
    assert 'up{job="dcgm-exporter"} == 1' in q and _by(q, "dcgm_up") == ["instance"]


def test_the_dcgm_job_is_the_one_the_prometheus_role_scrapes() -> None:
    from pathlib import Path

    import yaml

    from opsctl.evidence.prometheus import DCGM_JOB

    defaults = Path(__file__).resolve().parents[3] / "roles/prometheus/defaults/main.yml"
    jobs = yaml.safe_load(defaults.read_text())["prometheus_scrape_jobs"]
    assert next(j for j in jobs if j["group"] == "{{ prometheus_gpu_group }}")["job_name"] == DCGM_JOB
