"""SshSource against real sshd processes on loopback; the node's tools are scripts that print
genuine outputs, and its sysfs tree holds genuine values."""

from __future__ import annotations

import subprocess
import time

import pytest
from sshlab import SshLab

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
        for name in ("gpu-001", "gpu-002", "gpu-003", "gpu-005", "gpu-006", "gpu-007"):
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
    # genuine kernel lines: XID 64 (row remapper error: reset_gpu) fails, XID 94 warns
    assert ("gpu-xid", "FAIL") in problems("gpu-002") and ("gpu-xid", "WARN") in problems("gpu-002")
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
