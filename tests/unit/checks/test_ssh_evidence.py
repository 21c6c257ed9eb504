"""The SSH source's pure half: command outputs (genuine where a sample exists) -> evidence, for the
kernel log read through the journal or dmesg, and for probes that time out."""

from __future__ import annotations

import json

from test_catalogue import NOW

from opsctl.checks.model import Status
from opsctl.checks.runner import judge_node
from opsctl.checks.thresholds import load_thresholds
from opsctl.evidence.ssh import CommandResult, SshSettings, SshSource, commands, evidence_from_outputs

BOOT = "600f763a-0539-4fed-bee8-d87e2786e381"
CURSOR = (
    "s=6c94beb3369b4e30aeb6f4cea512c4dd;i=155;b=600f763a05394fedbee8d87e2786e381;"
    "m=1ea07e561;t=661bb12db9e5a;x=5aaf53251f84f498"
)


def _journal(real) -> str:
    """The genuine imbue XID/SXid lines in journalctl's short-monotonic shape, with its trailer."""
    lines = real("dmesg.xid_sxid_pcie_lines.imbue.txt").splitlines()
    return "\n".join(ln.replace("] ", "] gpu-001 kernel: ", 1) for ln in lines) + f"\n-- cursor: {CURSOR}\n"


def _outputs(real, **over: CommandResult) -> dict[str, CommandResult]:
    out = {
        "boot_id": CommandResult(0, BOOT + "\n"),
        "uptime": CommandResult(0, "2397200.00 100.0\n"),
        "nvidia_smi": CommandResult(0, real("nvidia-smi-q.h100x8.535.183.01.gpud.txt")),
        "kernel_log": CommandResult(0, _journal(real)),
    }
    out.update(over)
    return out


def test_kernel_log_from_the_journal(real):
    ev = evidence_from_outputs("gpu-001", _outputs(real), NOW, SshSettings())
    assert ev.xid_mode == "kernel-log" and ev.raw["kernel_log"] == {
        "via": "journal",
        "cursor": CURSOR,
        "lines": 4,
    }
    assert ev.boot_time == NOW - 2397200.0 and ev.boot_kind == "kernel"  # the kernel's boot_id
    assert [(x.xid, x.mono) for x in ev.xids] == [(94, 2397166.983093), (64, 2397166.923949)]
    assert [(s.sxid, s.fatal, s.switch) for s in ev.sxids] == [(12028, False, "0000:85:00")]
    assert all(NOW - 40 < x.time < NOW for x in ev.xids)


def test_kernel_log_falls_back_to_dmesg_and_says_so(real):
    fallback = "@opsctl-kernel-log: journalctl rc=1: -- No entries --\n" + real(
        "dmesg.xid_sxid_pcie_lines.imbue.txt"
    )
    ev = evidence_from_outputs(
        "gpu-001", _outputs(real, kernel_log=CommandResult(0, fallback)), NOW, SshSettings()
    )
    assert ev.raw["kernel_log"] == {"via": "dmesg", "journal_error": "journalctl rc=1: -- No entries --"}
    assert {x.xid for x in ev.xids} == {64, 94} and ev.xid_mode == "kernel-log"
    broken = CommandResult(
        1, "@opsctl-kernel-log: journalctl not found\n", "dmesg: read kernel buffer failed"
    )
    ev = evidence_from_outputs("gpu-001", _outputs(real, kernel_log=broken), NOW, SshSettings())
    assert ev.xids is None and ev.sxids is None and ev.xid_mode == ""
    assert ev.raw["kernel_log"]["dmesg_error"] == "dmesg: read kernel buffer failed"


def test_hung_nvidia_smi_is_a_timeout_not_zero_gpus(real):
    out = _outputs(real, nvidia_smi=CommandResult(124, ""), nvlink=CommandResult(124, ""))
    ev = evidence_from_outputs("gpu-001", out, NOW, SshSettings())
    assert ev.probe_timeouts == ["nvidia-smi"] and ev.gpu_count is None and ev.gpus == []
    ev.provides = frozenset({"gpu_count"})
    assert judge_node(ev, load_thresholds(), NOW).status is Status.UNKNOWN
    # a tool that fails outright still means what the driver says: no GPU
    out = _outputs(real, nvidia_smi=CommandResult(6, "No devices were found\n"))
    assert evidence_from_outputs("gpu-001", out, NOW, SshSettings()).gpu_count == 0


def test_hung_mount_is_unknown_and_reported(real):
    s = SshSettings(required_mounts=[{"path": "/lustre", "fstype": "lustre"}, {"path": "/home"}])
    out = _outputs(
        real,
        mounts=CommandResult(0, "mds@o2ib:/fs /lustre lustre rw 0 0\nnfs:/home /home nfs4 rw 0 0\n"),
        statfs0=CommandResult(124, ""),
        statfs1=CommandResult(0, "nfs\n"),
        lfs=CommandResult(0, ""),
    )
    ev = evidence_from_outputs("gpu-001", out, NOW, s)
    assert ev.probe_timeouts == ["mount:/lustre"]
    lustre, home = ev.mounts
    assert (lustre.present, lustre.responsive, home.responsive) == (True, None, True)
    th = load_thresholds({"mounts": {"required": s.required_mounts}})
    ev.provides = frozenset({"mounts"})
    (v,) = judge_node(ev, th, NOW).verdicts
    assert (v.code, v.status) == ("mount", Status.UNKNOWN)


def test_probes_run_under_timeout():
    cmds = commands(SshSettings(nvidia_smi_timeout=7, mount_timeout=3, required_mounts=[{"path": "/x y"}]))
    assert cmds["nvidia_smi"] == "timeout -k 5 7 nvidia-smi -q"
    assert cmds["statfs0"] == "timeout -k 5 3 stat -f -c %T -- '/x y'"
    assert "journalctl -k -b --no-pager -o short-monotonic --show-cursor $a" in cmds["kernel_log"]
    assert "--after-cursor" not in cmds["kernel_log"]  # first pass: the whole current boot


def test_cursor_state_round_trips_and_rejects_garbage():
    state = {
        "gpu-001": {
            "boot_id": BOOT,
            "cursor": CURSOR,
            "xids": [
                {"xid": 79, "gpu": 3, "count": 1, "time": NOW, "boot_id": BOOT, "message": "m", "mono": 5.0}
            ],
            "sxids": [],
        },
        "gpu-002": {"boot_id": BOOT, "cursor": "s=1;i=2'; reboot", "xids": []},
        "gpu-003": {"boot_id": BOOT, "cursor": "", "xids": [{"xid": "79"}]},
        "gpu-004": "nonsense",
    }
    src = SshSource()
    assert src.load_cursors(json.loads(json.dumps(state))) == ["gpu-002", "gpu-003", "gpu-004"]
    assert src.cursors() == {"gpu-001": state["gpu-001"]}
    assert json.loads(json.dumps(src.cursors())) == src.cursors()
