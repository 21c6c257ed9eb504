"""SshSource against real sshd processes on loopback; the node's tools are scripts that print
genuine outputs, and its sysfs tree holds genuine values."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from sshlab import REAL_WORLD, SshLab

from opsctl.checks import Status, judge, load_thresholds
from opsctl.evidence.ssh import SshSettings, SshSource

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = SshLab(tmp_path_factory.mktemp("sshlab"))
    try:
        lab.add_node("gpu-001")
        xid = lab.add_node("gpu-002")
        xid.set_dmesg("dmesg.xid_sxid_pcie_lines.imbue.txt")
        nogpu = lab.add_node("gpu-003")
        nogpu.set_nvidia_smi(None)
        lab.add_node("gpu-004")  # never started: unreachable
        other_key = tmp_path_factory.mktemp("otherkey") / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
        lab.add_node("gpu-005", host_key=other_key)  # presents a key known_hosts does not have
        counting = lab.add_node("gpu-006")
        counting.bump_counter_while_sampling("mlx5_0/ports/1/counters/link_downed", 3)
        down = lab.add_node("gpu-007")
        down.set_slurmd(False)
        lab.add_node("gpu-008").set_journal([])  # a node whose kernel log is in the journal
        lab.add_node("gpu-009")  # hangs a probe inside its test
        for name in ("gpu-001", "gpu-002", "gpu-003", "gpu-005", "gpu-006", "gpu-007", "gpu-008", "gpu-009"):
            lab.start(lab.nodes[name])
        yield lab
    finally:
        lab.close()


def settings(lab: SshLab, **kw) -> SshSettings:
    return SshSettings(
        user="root",
        key_filename=str(lab.client_key),
        known_hosts=str(lab.known_hosts),
        hosts={n: "127.0.0.1" for n in lab.nodes},
        ports={n: node.port for n, node in lab.nodes.items()},
        connect_timeout=5,
        node_timeout=30,
        parallel=4,
        ib_sample_seconds=0.5,
        **kw,
    )


def test_collect_and_judge_every_kind_of_node(lab):
    nodes = sorted(lab.nodes)
    now = time.time()
    evidence = SshSource(settings(lab)).collect(nodes, now)
    assert [e.node for e in evidence] == nodes
    reports = {r.node: r for r in judge(evidence, load_thresholds(), now)}

    def problems(node):
        return sorted((v.code, v.status.value) for v in reports[node].problems)

    # genuine H100 report: 8 GPUs, PCIe Gen5 x16, GPU 2 with the hardware power brake (WARN)
    assert reports["gpu-001"].status is Status.WARN
    assert problems("gpu-001") == [("gpu-throttle", "WARN")]
    ev1 = next(e for e in evidence if e.node == "gpu-001")
    assert ev1.gpu_count == 8 and ev1.boot_id and ev1.ib_ports[0].rate_gbps == 400.0
    assert ev1.ib_ports[0].counter_deltas == {k: 0 for k in ev1.ib_ports[0].counter_deltas}
    assert all(g.nvlink_links_down == 0 for g in ev1.gpus)
    # genuine kernel lines: XID 64 (row remapper error: reset_gpu) fails, XID 94 warns, the NVSwitch's
    # SXid 12028 ("Non-fatal") warns; read from dmesg, since the node has no journal, and said so
    assert ("gpu-xid", "FAIL") in problems("gpu-002") and ("gpu-xid", "WARN") in problems("gpu-002")
    assert ("nvswitch-sxid", "WARN") in problems("gpu-002")
    ev2 = next(e for e in evidence if e.node == "gpu-002")
    assert ev2.raw["kernel_log"] == {"via": "dmesg", "journal_error": "journalctl rc=1: -- No entries --"}
    assert ev2.xid_mode == "kernel-log" and ev2.boot_time is not None
    # nvidia-smi finds no GPU
    assert ("gpu-count", "FAIL") in problems("gpu-003")
    # unreachable and wrong host key: UNKNOWN, with the reason
    assert reports["gpu-004"].status is Status.UNKNOWN
    assert reports["gpu-005"].status is Status.UNKNOWN
    assert (
        "host key" in reports["gpu-005"].verdicts[0].summary
        or "refused" in reports["gpu-005"].verdicts[0].summary
    )
    # link_downed grew by 3 between the two samples
    v = next(v for v in reports["gpu-006"].problems if v.code == "ib-errors")
    assert v.status is Status.FAIL and v.evidence["increase"] == {"link_downed": 3}
    assert ("slurmd", "FAIL") in problems("gpu-007")


def test_required_mounts(lab):
    s = settings(lab, required_mounts=[{"path": "/"}, {"path": "/lustre", "fstype": "lustre"}])
    (ev,) = SshSource(s).collect(["gpu-001"], time.time())
    th = load_thresholds({"mounts": {"required": s.required_mounts}})
    (report,) = judge([ev], th, time.time())
    mounts = sorted((v.status.value, v.summary) for v in report.verdicts if v.code == "mount")
    assert mounts == [("FAIL", "/lustre not mounted")]
    assert ev.mounts[0].present and ev.mounts[0].responsive


def test_per_node_timeout_makes_only_that_node_unknown(lab):
    slow = lab.nodes["gpu-007"]
    slow.hang("dmesg")
    try:
        s = settings(lab)
        s.node_timeout = 12  # generous: only the stuck node may hit it
        evidence = {e.node: e for e in SshSource(s).collect(["gpu-001", "gpu-007"], time.time())}
        assert evidence["gpu-001"].reachable
        assert not evidence["gpu-007"].reachable and "timed out" in evidence["gpu-007"].error
    finally:
        slow.set_dmesg(None)


def _genuine(kind: str) -> str:
    """The message of the genuine imbue kernel line with this XID ("64", "94") or SXid."""
    for line in (REAL_WORLD / "dmesg.xid_sxid_pcie_lines.imbue.txt").read_text().splitlines():
        if f"): {kind}," in line:
            return line.split("] ", 1)[1]
    raise AssertionError(kind)


def test_journal_cursor_second_pass_reads_only_new_lines_and_keeps_the_first_xid(lab):
    node = lab.nodes["gpu-008"]
    node.journal_calls.unlink(missing_ok=True)
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    node.set_journal([(uptime - 300, "Linux version 6.1.0 (debian-kernel@lists.debian.org)"),
                      (uptime - 120, _genuine("64"))])
    th = load_thresholds()
    src = SshSource(settings(lab))

    (ev,) = src.collect(["gpu-008"], time.time())
    assert ev.raw["kernel_log"]["via"] == "journal" and ev.raw["kernel_log"]["lines"] == 2
    assert [x.xid for x in ev.xids] == [64] and ev.xid_mode == "kernel-log"
    (v,) = [v for v in judge([ev], th, time.time())[0].problems if v.code == "gpu-xid"]
    assert (v.status, v.evidence["action"]) == (Status.FAIL, "reset_gpu")

    node.journal_append(uptime - 10, _genuine("94"))
    (ev,) = src.collect(["gpu-008"], time.time())
    calls = node.journal_invocations()
    assert not any(a.startswith("--after-cursor=") for a in calls[0])  # first pass: the whole boot
    assert calls[1][-1].startswith("--after-cursor=") and ";i=2;" in calls[1][-1]
    assert ev.raw["kernel_log"]["lines"] == 1  # only the new line came over the wire ...
    # ... and the XID of the first pass, still inside the window, is still judged
    verdicts = {v.evidence["xid"]: v for v in judge([ev], th, time.time())[0].problems if v.code == "gpu-xid"}
    assert (verdicts[64].status, verdicts[94].status) == (Status.FAIL, Status.WARN)

    # a restarted service restores the state it persisted: no line is read twice, none is lost
    state = json.loads(json.dumps(src.cursors()))
    again = SshSource(settings(lab))
    assert again.load_cursors(state) == []
    (ev,) = again.collect(["gpu-008"], time.time())
    assert ev.raw["kernel_log"]["lines"] == 0 and sorted(x.xid for x in ev.xids) == [64, 94]


def test_hung_nvidia_smi_and_hung_mount_show_in_probe_timeouts(lab):
    node = lab.nodes["gpu-009"]
    node.hang("nvidia-smi")
    node.hang_mount("/")
    try:
        s = settings(lab, required_mounts=[{"path": "/"}], nvidia_smi_timeout=1, mount_timeout=1)
        (ev,) = SshSource(s).collect(["gpu-009"], time.time())
        assert ev.reachable and ev.probe_timeouts == ["nvidia-smi", "mount:/"]
        assert ev.gpu_count is None and ev.mounts[0].responsive is None
        th = load_thresholds({"mounts": {"required": s.required_mounts}})
        (report,) = judge([ev], th, time.time())
        status = {v.code: v.status for v in report.verdicts}
        assert status["mount"] is Status.UNKNOWN and status["gpu-count"] is Status.UNKNOWN
        assert report.probe_timeouts == ["nvidia-smi", "mount:/"]
    finally:
        node.set_nvidia_smi("nvidia-smi-q.h100x8.535.183.01.gpud.txt")
        (node.bin / "stat").unlink()
