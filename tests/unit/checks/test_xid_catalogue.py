"""opsctl's XID actions against NVIDIA's published XID catalogue.

The expected table below is typed from NVIDIA's "Analyzing Xid Errors with the Xid Catalog" page
(Ampere and later, "Resolution Bucket (Immediate Action)" column, XIDs 1-172), independently of
opsctl/checks/xid_catalogue.toml, and mapped through the bucket table documented in
docs/health-checks.md. If the data file drifts from either, a case here fails.
"""

from __future__ import annotations

import pytest

from opsctl.checks.catalogue import check_xid
from opsctl.checks.model import Status
from opsctl.checks.thresholds import load_thresholds
from opsctl.checks.xid_catalogue import catalogue, parse_catalogue
from opsctl.errors import ConfigError
from opsctl.evidence.model import FACTS, Evidence, GpuEvidence, XidEvent

NOW = 1_700_000_000.0


def _r(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


# NVIDIA's immediate-action bucket per XID, as published ("" = the row publishes none).
PUBLISHED: dict[str, list[int]] = {
    "CONTACT_SUPPORT": [*_r(1, 7), 9, 10, 12, *_r(15, 24), *_r(26, 30), *_r(33, 36), 42, 47,
                        *_r(49, 53), *_r(55, 59), 61, 65, 73, 81, 87, 90, 91, *_r(111, 118),
                        *_r(122, 125), 138, 142],
    "RESTART_APP": [8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80,
                    *_r(82, 86), 88, 89, 94, *_r(96, 105), *_r(126, 135), 139],
    "IGNORE": [14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152, 153, 157,
               160, 161],
    "RESET_GPU": [46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158],
    "RESTART_BM": [79],
    "RESTART_VM": [151],
    "CHECK_MECHANICALS": [54],
    "UPDATE_SWFW": [78],
    "CHECK_UVM": [159],
    "WORKFLOW_XID_45": [45],
    "WORKFLOW_XID_48": [48],
    "WORKFLOW_NVLINK_ERR": [74],
    "WORKFLOW_NVLINK5_ERR": _r(144, 150),
    "XID_154": [154],
    "": _r(162, 172),
}
# docs/health-checks.md, "Bucket mapping".
BUCKET_CLASS = {
    "RESTART_APP": "restart_app",
    "IGNORE": "ignore",
    "RESET_GPU": "reset_gpu",
    "RESTART_BM": "reboot",
    "RESTART_VM": "reboot",
    "CONTACT_SUPPORT": "replace",
    "CHECK_MECHANICALS": "replace",
    "UPDATE_SWFW": "replace",
    "CHECK_UVM": "reset_gpu",
    "WORKFLOW_XID_45": "ignore",
    "WORKFLOW_XID_48": "reset_gpu",
    "WORKFLOW_NVLINK_ERR": "reset_gpu",
    "WORKFLOW_NVLINK5_ERR": "reset_gpu",
    "XID_154": "reset_gpu",
}
# docs/health-checks.md, "Rows without a published bucket".
NO_BUCKET = {162: "ignore", 163: "restart_app", 164: "restart_app", 165: "restart_app",
             166: "reboot", 167: "reboot", 168: "reboot", 169: "reboot", 170: "reboot",
             171: "reset_gpu", 172: "reset_gpu"}

EXPECTED = {
    xid: (bucket, NO_BUCKET[xid] if not bucket else BUCKET_CLASS[bucket])
    for bucket, xids in PUBLISHED.items()
    for xid in xids
}
VERDICT = {"ignore": None, "restart_app": Status.WARN, "reset_gpu": Status.FAIL,
           "reboot": Status.FAIL, "replace": Status.FAIL}


def _ev(*events: XidEvent, mode: str = "kernel-log", **kw: object) -> Evidence:
    gpus = [GpuEvidence(index=i, uuid=f"GPU-{i:08d}-1111-2222-3333-444444444444") for i in range(8)]
    return Evidence("gpu-001", "test", NOW, gpus=gpus, xids=list(events), xid_mode=mode,
                    provides=frozenset(FACTS), **kw)  # type: ignore[arg-type]


def test_expected_table_covers_every_xid_of_the_catalogue_once():
    listed = [x for xids in PUBLISHED.values() for x in xids]
    assert sorted(listed) == _r(1, 172) and len(listed) == len(set(listed))
    assert set(catalogue().entries) == set(EXPECTED)


@pytest.mark.parametrize(("xid", "bucket", "cls"), [(x, *EXPECTED[x]) for x in sorted(EXPECTED)])
def test_each_xid_takes_the_action_nvidia_publishes(xid, bucket, cls):
    th = load_thresholds()
    entry = th.xid_entry(xid)
    assert entry is not None and entry.nvidia_action == bucket and entry.name
    assert th.xid_class(xid) == cls
    verdicts = check_xid(_ev(XidEvent(xid, gpu=2, time=NOW - 30)), th, NOW)
    want = VERDICT[cls]
    if want is None:
        assert [v.status for v in verdicts] == [Status.OK]
    else:
        (v,) = verdicts
        assert (v.status, v.evidence["action"], v.evidence["xid"], v.gpu) == (want, cls, xid, 2)
        assert v.evidence["nvidia_action"] == bucket and v.evidence["name"] == entry.name


@pytest.mark.parametrize(
    ("xid", "cls"),
    [(46, "reset_gpu"), (109, "reset_gpu"), (110, "reset_gpu"), (154, "reset_gpu"), (155, "reset_gpu"),
     (156, "reset_gpu"), (157, "ignore"), (158, "reset_gpu"), (160, "ignore")],
)
def test_the_xids_the_issue_names(xid, cls):
    # these used to fall to a WARN default; now each takes its published bucket
    assert load_thresholds().xid_class(xid) == cls


@pytest.mark.parametrize(
    ("label", "cls", "status"),
    [("0x2 (Node Reboot Required)", "reboot", Status.FAIL),
     ("0x1 (GPU Reset Required)", "reset_gpu", Status.FAIL),
     ("0x4 (Drain and Reset)", "reset_gpu", Status.FAIL),
     ("0x3 (Drain P2P)", "restart_app", Status.WARN)],
)
def test_xid_154_follows_the_action_its_message_names(label, cls, status):
    msg = f"GPU recovery action changed from 0x0 (None) to {label}"
    (v,) = check_xid(_ev(XidEvent(154, gpu=1, time=NOW, message=msg)), load_thresholds(), NOW)
    assert (v.status, v.evidence["action"]) == (status, cls)


def test_xid_154_back_to_none_is_not_a_fault():
    msg = "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    assert [v.status for v in check_xid(_ev(XidEvent(154, gpu=1, time=NOW, message=msg)),
                                        load_thresholds(), NOW)] == [Status.OK]


def test_unknown_xid_is_fatal_with_reboot():
    (v,) = check_xid(_ev(XidEvent(999, gpu=0, time=NOW)), load_thresholds(), NOW)
    assert (v.status, v.evidence["action"], v.evidence["nvidia_action"]) == (Status.FAIL, "reboot", "")


def test_xid_45_after_79_on_the_same_gpu_still_fails():
    ev = _ev(XidEvent(79, gpu=3, time=NOW - 20), XidEvent(45, gpu=3, time=NOW - 10))
    vs = check_xid(ev, load_thresholds(), NOW)
    assert [(v.evidence["xid"], v.status, v.evidence["action"]) for v in vs] == [(79, Status.FAIL, "reboot")]
    v = vs[0]
    assert v.evidence["uuid"] == "GPU-00000003-1111-2222-3333-444444444444"
    assert v.evidence["name"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert (v.evidence["count"], v.evidence["last"], v.gpu) == (1, NOW - 20, 3)


def test_policy_window_by_event_time_and_boot_time():
    th = load_thresholds({"xid": {"window_seconds": 7200}})
    # older than an exporter's 5-minute window but inside the policy's two hours: still current
    (v,) = check_xid(_ev(XidEvent(48, gpu=0, time=NOW - 3000)), th, NOW)
    assert v.status is Status.FAIL
    assert check_xid(_ev(XidEvent(48, gpu=0, time=NOW - 8000)), th, NOW)[0].status is Status.OK
    # before the current boot started: history, whatever the window says
    ev = _ev(XidEvent(79, gpu=0, time=NOW - 600), boot_time=NOW - 300)
    assert check_xid(ev, th, NOW)[0].status is Status.OK
    ev = _ev(XidEvent(79, gpu=0, time=NOW - 200), boot_time=NOW - 300)
    assert check_xid(ev, th, NOW)[0].status is Status.FAIL


def test_last_value_mode_fatal_fails_harmless_is_unknown_zero_is_ok():
    th = load_thresholds()
    (v,) = check_xid(_ev(XidEvent(79, gpu=1), mode="last-value"), th, NOW)
    assert v.status is Status.FAIL and "last XID per GPU only" in v.summary
    # 45 after a fatal 79: only the 45 is left in the gauge. Never OK.
    (v,) = check_xid(_ev(XidEvent(45, gpu=1), mode="last-value"), th, NOW)
    assert v.status is Status.UNKNOWN and "may be hidden" in v.summary
    (v,) = check_xid(_ev(XidEvent(13, gpu=1), mode="last-value"), th, NOW)
    assert v.status is Status.UNKNOWN
    for events in ([XidEvent(0, gpu=1)], []):
        (v,) = check_xid(_ev(*events, mode="last-value"), th, NOW)
        assert v.status is Status.OK and "last XID per GPU only" in v.summary


def test_site_override_is_merged_over_the_catalogue_and_validated():
    site = load_thresholds({"xid": {"classes": {"13": "replace", "79": "replace", "43": "reset_gpu"}}})
    assert (site.xid_class(13), site.xid_class(79), site.xid_class(43)) == ("replace", "replace", "reset_gpu")
    assert site.xid_class(31) == "restart_app"  # untouched rows keep NVIDIA's bucket
    (v,) = check_xid(_ev(XidEvent(13, gpu=0, time=NOW)), site, NOW)
    assert (v.status, v.evidence["action"]) == (Status.FAIL, "replace")
    assert load_thresholds().data["xid"]["classes"] == {}  # empty by default
    for bad in ({"13": "panic"}, {"x13": "ignore"}, {"0": "ignore"}):
        with pytest.raises(ConfigError):
            load_thresholds({"xid": {"classes": bad}})
    with pytest.raises(ConfigError):
        load_thresholds({"xid": {"default_class": "warn"}})


def test_catalogue_file_is_checked_against_its_bucket_table():
    base = {"buckets": {"RESET_GPU": "reset_gpu"}}
    parse_catalogue({**base, "xids": {"46": {"name": "X", "nvidia": "RESET_GPU", "class": "reset_gpu"}}})
    with pytest.raises(ConfigError, match="bucket table"):
        parse_catalogue({**base, "xids": {"46": {"name": "X", "nvidia": "RESET_GPU", "class": "ignore"}}})
    with pytest.raises(ConfigError, match="no reason"):
        parse_catalogue({**base, "xids": {"162": {"name": "X", "nvidia": "", "class": "ignore"}}})
    with pytest.raises(ConfigError):
        parse_catalogue({"buckets": {"RESET_GPU": "warn"}, "xids": {}})


# nvmlDeviceGpuRecoveryAction_t (DCGM's sdk/nvidia/nvml/dcgm_nvml.h): each value's label in the
# XID 154 message, and the name the Prometheus source gives the value of DCGM field 1523
RECOVERY_VALUES = [
    (0, "None", "none"),
    (1, "GPU Reset Required", "reset"),
    (2, "Node Reboot Required", "reboot"),
    (3, "Drain P2P", "drain_p2p"),
    (4, "Drain and Reset", "drain_and_reset"),
]


@pytest.mark.parametrize(("value", "label", "name"), RECOVERY_VALUES)
def test_xid_154_takes_the_same_class_from_its_message_or_from_the_recovery_action(value, label, name):
    from opsctl.evidence.prometheus import RECOVERY_ACTIONS

    th = load_thresholds()
    assert RECOVERY_ACTIONS[value] == name
    message = f"GPU recovery action changed from 0x0 (None) to {value:#x} ({label})"
    by_message = th.xid_class_basis(154, message)
    assert by_message == (th.xid_class_basis(154, "", name)[0], "message")
    assert th.xid_class_basis(154, "", name)[1] == "recovery_action"


def test_xid_154_message_wins_over_the_recovery_action_and_the_site_over_both():
    msg = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    (v,) = check_xid(_ev(XidEvent(154, gpu=1, time=NOW, message=msg, recovery_action="reboot")),
                     load_thresholds(), NOW)
    assert (v.evidence["action"], v.evidence["class_from"]) == ("reset_gpu", "message")
    assert "recovery_from" not in v.evidence and "as its message names" in v.summary
    site = load_thresholds({"xid": {"classes": {"154": "replace"}}})
    (v,) = check_xid(_ev(XidEvent(154, gpu=1, time=NOW, recovery_action="drain_p2p")), site, NOW)
    assert (v.evidence["action"], v.evidence["class_from"]) == ("replace", "site")
    # other XIDs never look at a recovery action
    (v,) = check_xid(_ev(XidEvent(48, gpu=1, time=NOW, recovery_action="reboot")), load_thresholds(), NOW)
    assert (v.evidence["action"], v.evidence["class_from"]) == ("reset_gpu", "catalogue")


def test_the_worst_class_of_two_xid_154_events_keeps_its_own_evidence():
    log = XidEvent(154, gpu=1, time=NOW - 60, message="changed from 0x0 (None) to 0x3 (Drain P2P)")
    counted = XidEvent(154, gpu=1, time=NOW, recovery_action="reboot", recovery_from="DCGM_FI_X=2")
    (v,) = check_xid(_ev(log, counted), load_thresholds(), NOW)
    assert (v.evidence["action"], v.evidence["class_from"], v.evidence["recovery_from"]) == (
        "reboot", "recovery_action", "DCGM_FI_X=2")
    assert v.evidence["count"] == 2
