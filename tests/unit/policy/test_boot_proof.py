"""Proof of reboot: a latch remembers the kind of boot id it holds (the kernel's boot_id, or the
boot time, which a clock step moves) and never compares ids of different kinds; latches written
before kinds were recorded keep working."""

from __future__ import annotations

import json

from test_latching import UUID, failing, run
from test_policy import NOW, RecordingSlurm, actions, cluster, ok, reports

from opsctl.checks import judge_node
from opsctl.checks.runner import NodeReport
from opsctl.checks.settings import PolicyConfig
from opsctl.checks.thresholds import load_thresholds
from opsctl.evidence.composite import merge_evidence
from opsctl.evidence.model import Evidence
from opsctl.remediation.proof import BTIME_REBOOT_SECONDS, resume_proof
from opsctl.remediation.state import Latch, PolicyState

KERNEL_1 = "8a3f0c4e-1f6b-4a8e-9b1d-2c7e5f0a9d31"
KERNEL_2 = "d41c7b02-93aa-4e5f-8f60-7b2e1c9a4f08"
BOOTED = 1_699_990_000.0  # the current boot's start (before NOW)


def report(
    boot_id: str = "",
    kind: str = "",
    boot_time: float | None = None,
    node: str = "gpu-003",
    recovery: str | None = None,
) -> NodeReport:
    r = ok(node)
    r.boot_id, r.boot_kind, r.boot_time, r.gpu_uuids = boot_id, kind, boot_time, {3: UUID}
    if recovery:
        r.recovery = {3: recovery}
    return r


def reboot_latch(boot_id: str, kind: str = "") -> Latch:
    return Latch(
        reason="opsctl:health:gpu-xid:xid 79 gpu 3",
        time=NOW,
        code="gpu-xid",
        action="reboot",
        gpu=3,
        gpu_uuid=UUID,
        boot_id=boot_id,
        boot_kind=kind,
    )


def test_same_kernel_boot_id_with_the_boot_time_stepped_30_s_is_not_a_reboot() -> None:
    latch = reboot_latch(KERNEL_1, "kernel")
    proven, why = resume_proof(latch, report(KERNEL_1, "kernel", BOOTED + 30))
    assert not proven and "boot id unchanged" in why
    proven, why = resume_proof(latch, report(KERNEL_2, "kernel", BOOTED + 30))
    assert proven and "kernel's boot id changed" in why


def test_a_boot_time_latch_allows_for_a_clock_step_and_proves_a_later_boot() -> None:
    latch = reboot_latch(f"boot-{int(BOOTED)}", "btime")
    stepped = report(f"boot-{int(BOOTED) + 30}", "btime", BOOTED + 30)
    proven, why = resume_proof(latch, stepped)
    assert not proven and "clock step" in why
    backwards = report(f"boot-{int(BOOTED) - 3600}", "btime", BOOTED - 3600)  # a step back is no boot
    assert not resume_proof(latch, backwards)[0]
    later = BOOTED + BTIME_REBOOT_SECONDS + 3600
    proven, why = resume_proof(latch, report(f"boot-{int(later)}", "btime", later))
    assert proven and "boot time moved" in why
    # a kernel-kind pass that also knows the boot time answers a boot-time latch
    assert resume_proof(latch, report(KERNEL_2, "kernel", later))[0]
    assert not resume_proof(latch, report(KERNEL_1, "kernel", BOOTED + 30))[0]


def test_ids_of_different_kinds_or_no_id_cannot_prove_a_reboot() -> None:
    kernel = reboot_latch(KERNEL_1, "kernel")
    # node_exporter's boot id metric gone: only the boot time, an hour later (a clock step, or not)
    proven, why = resume_proof(kernel, report(f"boot-{int(BOOTED) + 3600}", "btime", BOOTED + 3600))
    assert not proven and "cannot prove a reboot" in why
    proven, why = resume_proof(kernel, report())
    assert not proven and "no boot id" in why
    btime = reboot_latch(f"boot-{int(BOOTED)}", "btime")
    proven, why = resume_proof(btime, report(KERNEL_2, "kernel"))  # a kernel id, no boot time
    assert not proven and "cannot prove a reboot" in why
    assert not resume_proof(reboot_latch(""), report(KERNEL_2, "kernel", BOOTED + 9999))[0]


def test_node_exporter_down_fleet_wide_holds_every_latch_instead_of_resuming_it() -> None:
    """Drained on Prometheus's boot time; then node_exporter is down everywhere and the composite
    source's boot ids are SSH's kernel boot ids (no boot time: SSH's uptime read failed too). Before
    kinds, every latch compared unequal and read "rebooted"."""
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=1)
    state = PolicyState()
    drained = failing("gpu-003", boot=f"boot-{int(BOOTED)}")
    drained.boot_kind, drained.boot_time = "btime", BOOTED
    run(nodes, reports(nodes, {"gpu-003": drained}), state, cfg, NOW, slurm)
    assert state.latch("gpu-003").boot_kind == "btime"
    for i in range(1, 4):
        at = NOW + 30 * i
        prom = Evidence("gpu-003", "prometheus", at, gpu_count=8)  # no node_exporter series
        ssh = Evidence("gpu-003", "ssh", at, gpu_count=8, boot_id=KERNEL_1, boot_kind="kernel")
        (ev,) = merge_evidence(
            ["gpu-003"], ["prometheus", "ssh"], [{"gpu-003": prom}, {"gpu-003": ssh}], at, "prometheus+ssh"
        )
        assert (ev.boot_id, ev.boot_kind) == (KERNEL_1, "kernel")  # the composite's pick for the fleet
        ds = run(
            nodes, reports(nodes, {"gpu-003": judge_node(ev, load_thresholds(), at)}), state, cfg, at, slurm
        )
        (d,) = [d for d in ds if d.node == "gpu-003"]
        assert d.action == "keep" and "cannot prove a reboot" in d.why, d
    assert actions(ds, "resume") == [] and state.latch("gpu-003") is not None


def test_a_clock_step_does_not_end_the_latch_s_boot_for_the_reset_proof() -> None:
    """While latched, the driver asking for a reset counts for the reset proof in the same boot: a
    boot time moved by a clock step is still that boot."""
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    state = PolicyState()
    drained = failing("gpu-003", "gpu-ecc-dbe", "reset_gpu", boot=f"boot-{int(BOOTED)}")
    drained.boot_kind, drained.boot_time = "btime", BOOTED
    run(nodes, reports(nodes, {"gpu-003": drained}), state, PolicyConfig(), NOW, slurm)
    stepped = report(f"boot-{int(BOOTED) + 30}", "btime", BOOTED + 30, recovery="reset")
    run(nodes, reports(nodes, {"gpu-003": stepped}), state, PolicyConfig(), NOW + 30, slurm)
    assert state.latch("gpu-003").reset_seen


def test_latches_of_an_older_state_file_keep_their_kind(tmp_path) -> None:
    """State files written before kinds: the Prometheus source's boot ids were "boot-<btime>", the
    SSH source's the kernel's boot_id. Each latch keeps the kind it was written with."""
    nodes = cluster()
    slurm = RecordingSlurm(nodes)
    cfg = PolicyConfig(resume_after_clean=1)
    state = PolicyState()
    run(
        nodes,
        reports(
            nodes,
            {
                "gpu-003": failing("gpu-003", boot=f"boot-{int(BOOTED)}"),
                "gpu-005": failing("gpu-005", boot=KERNEL_1),
            },
        ),
        state,
        cfg,
        NOW,
        slurm,
    )
    path = tmp_path / "health-state.json"
    state.save(path)
    data = json.loads(path.read_text())
    for latch in data["latches"].values():
        del latch["boot_kind"]  # as the previous version wrote it
    path.write_text(json.dumps(data))
    state = PolicyState.load(path)
    assert state.latch("gpu-003").boot_kind == "" and state.latch("gpu-005").boot_kind == ""

    def pass_(at: float, **by_node: NodeReport) -> list[str]:
        return actions(run(nodes, reports(nodes, by_node), state, cfg, at, slurm), "resume")

    same = {
        "gpu-003": report(KERNEL_2, "kernel", BOOTED + 30),  # now with the kernel's boot id
        "gpu-005": report(KERNEL_1, "kernel", BOOTED + 30, node="gpu-005"),
    }
    assert pass_(NOW + 30, **same) == []
    # the boot time only moves for gpu-003; gpu-005's kernel latch cannot be proven by it
    moved = {
        "gpu-003": report(f"boot-{int(NOW)}", "btime", NOW),
        "gpu-005": report(f"boot-{int(NOW)}", "btime", NOW, node="gpu-005"),
    }
    assert pass_(NOW + 60, **moved) == ["gpu-003"]
    assert pass_(NOW + 90, **{"gpu-005": report(KERNEL_2, "kernel", NOW, node="gpu-005")}) == ["gpu-005"]
    assert state.latches == {}


def test_a_report_carries_its_evidence_s_boot_kind_and_time() -> None:
    ev = Evidence(
        "gpu-003", "prometheus", NOW, gpu_count=8, boot_id=KERNEL_1, boot_kind="kernel", boot_time=BOOTED
    )
    r = judge_node(ev, load_thresholds(), NOW)
    assert (r.boot_id, r.boot_kind, r.boot_time) == (KERNEL_1, "kernel", BOOTED)
    assert r.to_json()["boot_kind"] == "kernel"
    gone = judge_node(
        Evidence("gpu-003", "prometheus", NOW, reachable=False, boot_id=KERNEL_1, boot_kind="kernel"),
        load_thresholds(),
        NOW,
    )
    assert gone.boot_kind == "kernel"
