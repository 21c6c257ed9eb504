"""GPU recovery action, NVLink fabric state and NVSwitch SXids are judged, not only parsed; every
FAIL names the action class remediation must see proven."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_catalogue import NOW, healthy

from opsctl.checks.catalogue import CATALOGUE, FAIL_ACTION, check_fabric, check_recovery, check_sxid
from opsctl.checks.model import Status
from opsctl.checks.runner import judge_node
from opsctl.evidence.convert import gpus_from_nvidia_smi, sxids_from_dmesg
from opsctl.evidence.model import Evidence, GpuEvidence, SxidEvent
from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q


def _gpu(**kw: object) -> Evidence:
    ev = healthy()
    ev.gpus[4] = replace(ev.gpus[4], **kw)  # type: ignore[arg-type]
    return ev


@pytest.mark.parametrize(
    ("fields", "status", "action"),
    [
        ({"recovery_action": "none", "reset_required": False}, Status.OK, None),
        ({"recovery_action": "reset"}, Status.FAIL, "reset_gpu"),
        ({"recovery_action": "drain_and_reset"}, Status.FAIL, "reset_gpu"),
        ({"recovery_action": None, "reset_required": True}, Status.FAIL, "reset_gpu"),
        ({"recovery_action": "none", "reset_required": True}, Status.FAIL, "reset_gpu"),
        ({"recovery_action": "reboot"}, Status.FAIL, "reboot"),
        # NVIDIA: quiesce peer-to-peer work, then the driver names the real action; nothing to prove
        ({"recovery_action": "drain_p2p"}, Status.FAIL, "restart_app"),
        ({"recovery_action": "something_new"}, Status.FAIL, "reboot"),
        ({"recovery_action": None, "reset_required": None}, Status.UNKNOWN, None),
    ],
)
def test_gpu_recovery(th, fields, status, action):
    vs = [v for v in check_recovery(_gpu(**fields), th, NOW) if v.status is not Status.OK]
    if status is Status.OK:
        assert vs == []
        return
    (v,) = vs
    assert v.status is status
    if action:
        assert v.gpu == 4 and v.evidence["action"] == action and v.evidence["uuid"].startswith("GPU-")


@pytest.mark.parametrize(
    ("state", "status_text", "booted_ago", "want"),
    [
        ("Completed", "Success", 3600, Status.OK),
        ("Not Supported", "N/A", 3600, Status.OK),  # no NVSwitch fabric on this system
        ("Completed", "Failure", 3600, Status.FAIL),
        ("Not Started", "N/A", 3600, Status.FAIL),
        ("In Progress", "N/A", 3600, Status.FAIL),
        ("In Progress", "N/A", 60, Status.UNKNOWN),  # the fabric manager is still registering
        ("Not Started", "N/A", None, Status.UNKNOWN),
    ],
)
def test_gpu_fabric(th, state, status_text, booted_ago, want):
    ev = _gpu(fabric_state=state, fabric_status=status_text)
    ev.boot_time = None if booted_ago is None else NOW - booted_ago
    vs = [v for v in check_fabric(ev, th, NOW) if v.status is not Status.OK]
    if want is Status.OK:
        assert vs == []
    else:
        (v,) = vs
        assert (v.status, v.gpu) == (want, 4)
        if want is Status.FAIL:
            assert v.evidence["action"] == "reboot"


def test_genuine_h100_report_has_fabric_and_recovery_facts(th, real):
    # The genuine 535.183.01 report prints "Fabric: State Completed, Status Success" and "GPU Reset
    # Status: Reset Required No, Drain and Reset Recommended No" for each of its 8 GPUs.
    gpus = gpus_from_nvidia_smi(parse_nvidia_smi_q(real("nvidia-smi-q.h100x8.535.183.01.gpud.txt")))
    assert {(g.fabric_state, g.fabric_status, g.recovery_action, g.reset_required) for g in gpus} == {
        ("Completed", "Success", "none", False)
    }
    ev = Evidence("h100", "ssh", NOW, gpus=gpus, provides=frozenset({"recovery", "fabric"}))
    r = judge_node(ev, th, NOW)
    assert r.status is Status.OK and sorted(v.code for v in r.verdicts) == ["gpu-fabric", "gpu-recovery"]
    assert r.recovery == dict.fromkeys(range(8), "none")


def test_genuine_sxid_line_non_fatal_warns(th, real):
    log = parse_dmesg_xids(real("dmesg.xid_sxid_pcie_lines.imbue.txt"))
    (rec,) = log.sxids
    assert (rec.code, rec.pci, rec.fatal) == (12028, "0000:85:00", False)
    sx = sxids_from_dmesg(log, "b1", now=NOW, uptime=186966.0)
    ev = Evidence("n", "ssh", NOW, boot_id="b1", sxids=sx, provides=frozenset({"sxid"}))
    (v,) = check_sxid(ev, th, NOW)
    assert (v.status, v.evidence["sxid"], v.evidence["switch"]) == (Status.WARN, 12028, "0000:85:00")
    assert "action" not in v.evidence


def test_fatal_sxid_fails_with_reboot(th, real):
    # The genuine line with its severity word changed to "Fatal" (the kernel's other spelling).
    line = real("dmesg.xid_sxid_pcie_lines.imbue.txt").splitlines()[2].replace("Non-fatal", "Fatal")
    sx = sxids_from_dmesg(parse_dmesg_xids(line), now=NOW, uptime=186966.0)
    (v,) = check_sxid(Evidence("n", "ssh", NOW, sxids=sx), th, NOW)
    assert (v.status, v.evidence["action"], v.evidence["kernel_said"]) == (Status.FAIL, "reboot", ["fatal"])


def test_sxid_always_fatal_table_window_and_unknown(th):
    ev = Evidence("n", "ssh", NOW, boot_id="b2", sxids=[
        SxidEvent(23001, "0000:85:00", fatal=False, time=NOW - 5, boot_id="b2"),  # listed always fatal
        SxidEvent(11004, "0000:86:00", fatal=None, time=NOW - 5, boot_id="b2"),  # severity unstated
        SxidEvent(12028, "0000:87:00", fatal=True, time=NOW - 7200, boot_id="b2"),  # out of window
        SxidEvent(12028, "0000:88:00", fatal=True, time=NOW - 5, boot_id="b1"),  # earlier boot
    ])
    assert sorted((v.evidence["sxid"], v.status.value) for v in check_sxid(ev, th, NOW)) == [
        (11004, "FAIL"),
        (23001, "FAIL"),
    ]
    assert check_sxid(Evidence("n", "ssh", NOW), th, NOW)[0].status is Status.UNKNOWN
    assert check_sxid(Evidence("n", "ssh", NOW, sxids=[]), th, NOW)[0].status is Status.OK


def test_every_check_declares_its_fail_action():
    assert {c.code for c in CATALOGUE} <= set(FAIL_ACTION)


@pytest.mark.parametrize(
    ("field", "value", "code", "action"),
    [
        ("ecc_dbe_volatile", 1, "gpu-ecc-dbe", "reset_gpu"),
        ("retired_pages_dbe", 2, "gpu-retired-pages", "replace"),
        ("remap_pending", True, "gpu-row-remap", "reset_gpu"),
        ("remap_failure", True, "gpu-row-remap", "replace"),
        ("nvlink_links_down", 2, "gpu-nvlink", "reset_gpu"),
        ("pcie_width", 8, "gpu-pcie", "reboot"),
        ("thermal_throttle", True, "gpu-throttle", "restart_app"),
    ],
)
def test_existing_fail_verdicts_carry_their_action(th, field, value, code, action):
    ev = _gpu(**{field: value})
    (v,) = [v for v in judge_node(ev, th, NOW).verdicts if v.status is Status.FAIL]
    assert (v.code, v.evidence["action"]) == (code, action)


def test_node_level_fail_actions(th):
    r = judge_node(healthy(gpu_count=7, slurmd_alive=False), th, NOW)
    assert sorted((v.code, v.evidence["action"]) for v in r.problems) == [
        ("gpu-count", "reboot"),
        ("slurmd", "none"),
    ]
    ev = healthy(dcgm_incidents=[{"gpu": 1, "system": "Memory", "status": "Failure", "message": "DBE"}])
    (v,) = judge_node(ev, th, NOW).problems
    assert (v.code, v.evidence["action"]) == ("dcgm-health", "reset_gpu")
    ev = healthy()
    ev.gpus = [GpuEvidence(index=0), *ev.gpus[1:]]
    assert all(v.status is not Status.FAIL for v in judge_node(ev, th, NOW).verdicts)
