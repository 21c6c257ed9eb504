"""[health] auto_reboot: a reboot-class drain on an idle node asks Slurm once to reboot it
(`scontrol reboot ASAP nextstate=RESUME`); Slurm resumes it from the new boot, and the kernel's boot
id, not Slurm's resume, proves the reboot."""

from __future__ import annotations

from test_latching import clean, failing
from test_policy import NOW, RecordingSlurm, actions, cluster, reports, unknown

from opsctl.checks.settings import PolicyConfig
from opsctl.remediation.actions import act
from opsctl.remediation.policy import decide
from opsctl.remediation.state import PolicyState

NODE = "gpu-003"
ON = PolicyConfig(auto_reboot=True)


class RebootingSlurm(RecordingSlurm):
    """slurmctld's part: a reboot request keeps the drain and sets our reason until the node is back."""

    def reboot(self, names, reason):
        for n in names:
            self.calls.append(("reboot", n, reason))
            self.nodes[n].flags |= {"DRAIN", "REBOOT_REQUESTED"}
            self.nodes[n].reason = reason

    def rebooted(self, node: str) -> None:
        """The node came back from the reboot and its slurmd registered: nextstate=RESUME."""
        self.nodes[node].flags -= {"DRAIN", "REBOOT_REQUESTED"}
        self.nodes[node].reason = ""


def run(nodes, rep, state, cfg, now, slurm, *, dry_run=False, shadow=False):
    ds = decide(reports(nodes, {NODE: rep}), nodes, state, cfg, now)
    act(ds, slurm, state, now, dry_run=dry_run, shadow=shadow)
    return ds


def drained(cfg=ON):
    nodes = cluster()
    slurm = RebootingSlurm(nodes)
    state = PolicyState()
    run(nodes, failing(NODE, boot="b1"), state, cfg, NOW, slurm)
    assert slurm.calls[-1][:2] == ("drain", NODE)
    return nodes, slurm, state


def test_off_by_default_nobody_is_rebooted():
    nodes, slurm, state = drained(PolicyConfig())
    for i in range(3):
        run(nodes, failing(NODE, boot="b1"), state, PolicyConfig(), NOW + 30 * (i + 1), slurm)
    assert [c[0] for c in slurm.calls] == ["drain"]


def test_an_idle_reboot_class_drain_is_rebooted_once_and_the_new_boot_id_ends_it():
    nodes, slurm, state = drained()
    reason = nodes[NODE].reason
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm)
    assert actions(ds, "reboot") == [NODE]
    assert slurm.calls[-1] == ("reboot", NODE, reason)  # our reason kept while Slurm reboots it
    assert state.latch(NODE).reboot_asked == NOW + 30
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 60, slurm)  # rebooting: asked once only
    assert actions(ds, "reboot") == [] and actions(ds, "keep") == [NODE]
    slurm.rebooted(NODE)
    ds = run(nodes, clean(NODE, boot="b2"), state, ON, NOW + 400, slurm)
    (d,) = [d for d in ds if d.node == NODE]
    assert d.action == "none" and "rebooted through Slurm" in d.why and "boot id changed" in d.why
    assert state.latch(NODE) is None
    assert [c[0] for c in slurm.calls] == ["drain", "reboot"]


def test_a_node_still_running_jobs_is_not_rebooted_until_idle():
    nodes, slurm, state = drained()
    nodes[NODE].state = "mixed"  # draining: its jobs finish first
    assert actions(run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm), "reboot") == []
    nodes[NODE].state, nodes[NODE].flags = "idle", nodes[NODE].flags | {"COMPLETING"}
    assert actions(run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 60, slurm), "reboot") == []
    nodes[NODE].flags.discard("COMPLETING")
    assert actions(run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 90, slurm), "reboot") == [NODE]


def test_resumed_by_slurm_without_a_new_boot_id_is_drained_again_for_its_reboot():
    nodes, slurm, state = drained()
    run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm)
    slurm.rebooted(NODE)  # Slurm believes it (a slurmd restarted with -b), the kernel says otherwise
    # the boot id's exporter may not have been scraped since the node came back: a grace first
    for t in (400, 415, 445):
        ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + t, slurm)  # a stale XID sample too
        (d,) = [d for d in ds if d.node == NODE]
        assert d.action == "none" and "waiting for its boot id (the same boot id for" in d.why, d.why
        assert not nodes[NODE].drain_flag
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 460, slurm)
    (d,) = [d for d in ds if d.node == NODE and d.action != "alert"]
    assert d.action == "drain" and "but not rebooted: boot id unchanged" in d.why
    assert not d.latch["escalated"] and "repeat" not in d.reason  # the same fault, drained again
    assert nodes[NODE].drain_flag and nodes[NODE].reason == slurm.calls[0][2]
    latch = state.latch(NODE)
    assert latch.action == "reboot" and not latch.in_service and not latch.reboot_asked
    # idle and drained again: the reboot is asked for once more
    assert actions(run(nodes, clean(NODE, boot="b1"), state, ON, NOW + 490, slurm), "reboot") == [NODE]


def test_no_evidence_right_after_the_reboot_waits_for_the_boot_id():
    nodes, slurm, state = drained()
    run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm)
    slurm.rebooted(NODE)
    ds = run(nodes, unknown(NODE), state, ON, NOW + 400, slurm)
    (d,) = [d for d in ds if d.node == NODE]
    assert d.action == "none" and "waiting for its boot id" in d.why
    assert state.latch(NODE) is not None
    run(nodes, clean(NODE, boot="b2"), state, ON, NOW + 430, slurm)
    assert state.latch(NODE) is None and not nodes[NODE].drain_flag


def test_no_reboot_without_a_boot_id_for_a_reset_class_or_for_an_escalated_latch():
    for rep, why in ((failing(NODE, boot=""), "no boot id"),
                     (failing(NODE, action="reset_gpu", boot="b1"), "reset class"),
                     (failing(NODE, action="replace", boot="b1"), "replace class")):
        nodes = cluster()
        slurm = RebootingSlurm(nodes)
        state = PolicyState()
        run(nodes, rep, state, ON, NOW, slurm)
        run(nodes, rep, state, ON, NOW + 30, slurm)
        assert [c[0] for c in slurm.calls] == ["drain"], why
    nodes, slurm, state = drained()
    latch = state.latch(NODE)
    latch.escalated = True
    state.set_latch(NODE, latch)
    assert actions(run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm), "reboot") == []


def test_dry_run_and_shadow_show_the_reboot_and_change_nothing_in_slurm():
    nodes, slurm, state = drained()
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, slurm, dry_run=True)
    (d,) = [d for d in ds if d.action == "reboot"]
    assert d.result == "dry-run" and not state.latch(NODE).reboot_asked
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 60, slurm, shadow=True)
    (d,) = [d for d in ds if d.action == "reboot"]
    assert d.result == "shadow" and state.latch(NODE).reboot_asked == NOW + 60
    assert [c[0] for c in slurm.calls] == ["drain"]


def test_actions_that_cannot_reboot_record_a_refusal():
    nodes, _, state = drained()
    ds = run(nodes, failing(NODE, boot="b1"), state, ON, NOW + 30, RecordingSlurm(nodes))
    (d,) = [d for d in ds if d.action == "reboot"]
    assert d.result == "refused" and "cannot reboot" in d.why and not state.latch(NODE).reboot_asked
