"""CompositeSource: each fact of each node from the first source that has it.

The two sources here are plain objects returning fixed Evidence (the sim's nodes cannot be reached
over SSH); the merge itself is pure.
"""

from __future__ import annotations

import pytest

from opsctl.checks import judge, load_thresholds
from opsctl.checks.settings import HealthSection
from opsctl.errors import Unreachable, UsageError
from opsctl.evidence.composite import CompositeSource
from opsctl.evidence.model import Evidence, GpuEvidence, IbPortEvidence, MountEvidence, XidEvent
from opsctl.health.service import HealthContext, make_source

NOW = 1_796_000_000.0
PROM_FACTS = frozenset({"gpu_count", "xid", "ecc", "row_remap", "pcie", "ib", "ib_errors"})
SSH_FACTS = frozenset(
    {"gpu_count", "xid", "ecc", "row_remap", "nvlink", "ib", "ib_errors", "mounts", "slurmd"}
)


class Fixed:
    """A source that answers with the evidence it was given (or raises)."""

    def __init__(self, name: str, evidence: list[Evidence] | Exception) -> None:
        self.name = name
        self.evidence = evidence
        self.asked: list[list[str]] = []

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        self.asked.append(list(nodes))
        if isinstance(self.evidence, Exception):
            raise self.evidence
        return [e for e in self.evidence if e.node in nodes]


def port(dev: str, state: str = "ACTIVE", counters: dict[str, int] | None = None) -> IbPortEvidence:
    return IbPortEvidence(
        dev, 1, state, "LinkUp" if state == "ACTIVE" else "Polling", 400.0, None, counters, 600.0
    )


def prom(node: str, **kw: object) -> Evidence:
    ev = Evidence(
        node,
        "prometheus",
        NOW,
        gpu_count=8,
        gpus=[
            GpuEvidence(
                i,
                uuid=f"GPU-{node}-{i}",
                ecc_dbe_volatile=0,
                remap_pending=False,
                remap_failure=False,
                pcie_gen=5,
                pcie_width=16,
                recovery_action="none",
            )
            for i in range(8)
        ],
        xids=[],
        xid_mode="count",
        ib_ports=[port("mlx5_0", counters={"link_downed": 0})],
        boot_id=f"boot-{node[-1]}00",
        boot_time=float(f"{node[-1]}00"),
        provides=PROM_FACTS,
    )
    for key, value in kw.items():
        setattr(ev, key, value)
    return ev


def ssh(node: str, **kw: object) -> Evidence:
    ev = Evidence(
        node,
        "ssh",
        NOW,
        gpu_count=8,
        gpus=[
            GpuEvidence(
                i,
                uuid=f"GPU-{node}-{i}",
                ecc_dbe_volatile=0,
                remap_pending=False,
                remap_failure=False,
                nvlink_links_down=0,
                nvlink_links_total=18,
                reset_required=False,
            )
            for i in range(8)
        ],
        xids=[],
        xid_mode="kernel-log",
        ib_ports=[port("mlx5_0", counters={"link_downed": 0})],
        mounts=[MountEvidence("/lustre", "lustre", True, True)],
        slurmd_alive=True,
        boot_id=f"5c0ffee-{node}",
        provides=SSH_FACTS,
    )
    for key, value in kw.items():
        setattr(ev, key, value)
    return ev


def collect(
    p: list[Evidence] | Exception, s: list[Evidence] | Exception, nodes: list[str]
) -> dict[str, Evidence]:
    src = CompositeSource([Fixed("prometheus", p), Fixed("ssh", s)])
    return {ev.node: ev for ev in src.collect(nodes, NOW)}


def test_each_fact_comes_from_the_first_source_that_has_it_and_provides_is_the_union() -> None:
    (ev,) = collect([prom("gpu-001")], [ssh("gpu-001")], ["gpu-001"]).values()
    assert ev.source == "prometheus+ssh" and ev.reachable
    assert ev.provides == PROM_FACTS | SSH_FACTS
    assert ev.xid_mode == "count" and ev.boot_id == "boot-100" and ev.boot_time == 100.0
    assert ev.mounts == [MountEvidence("/lustre", "lustre", True, True)] and ev.slurmd_alive is True
    # per GPU: Prometheus's fields, and what only SSH sees (NVLink state, reset required) filled in
    g = ev.gpus[1]
    assert (g.recovery_action, g.pcie_gen, g.nvlink_links_down, g.reset_required) == ("none", 5, 0, False)
    assert ev.raw["origin"]["xids"] == "prometheus" and ev.raw["origin"]["mounts"] == "ssh"
    assert ev.raw["origin"]["gpu.nvlink_links_down"] == "ssh"
    (report,) = judge([ev], load_thresholds(), NOW)
    assert report.status.value == "OK" and {"slurmd", "gpu-nvlink", "gpu-pcie", "gpu-row-remap"} <= {
        v.code for v in report.verdicts
    }


def test_node_exporter_down_takes_the_ports_from_ssh() -> None:
    evs = collect(
        [prom("gpu-001", ib_ports=None, boot_id="", boot_time=None), prom("gpu-002")],
        [ssh("gpu-001", ib_ports=[port("mlx5_0", "DOWN", {"link_downed": 1})]), ssh("gpu-002")],
        ["gpu-001", "gpu-002"],
    )
    assert evs["gpu-001"].ib_ports is not None and evs["gpu-001"].ib_ports[0].state == "DOWN"
    assert evs["gpu-001"].raw["origin"]["ib_ports"] == "ssh"
    # the boot comes from one source for the whole fleet: no Prometheus boot on gpu-001 is an
    # unknown boot, not SSH's boot id (which would read as a reboot)
    assert (evs["gpu-001"].boot_id, evs["gpu-001"].boot_time) == ("", None)
    assert evs["gpu-002"].boot_id == "boot-200"


def test_a_node_one_source_cannot_reach_keeps_the_others_facts() -> None:
    evs = collect(
        [
            prom("gpu-001"),
            Evidence("gpu-002", "prometheus", NOW, reachable=False, error="no dcgm-exporter series"),
        ],
        [Evidence("gpu-001", "ssh", NOW, reachable=False, error="connection refused"), ssh("gpu-002")],
        ["gpu-001", "gpu-002", "gpu-003"],
    )
    assert evs["gpu-001"].reachable and evs["gpu-001"].mounts is None and evs["gpu-001"].gpu_count == 8
    assert evs["gpu-001"].raw["unreachable"] == ["ssh: connection refused"]
    assert evs["gpu-002"].reachable and evs["gpu-002"].xid_mode == "kernel-log"
    assert evs["gpu-002"].boot_id == ""  # Prometheus gives the fleet's boots; it has none for gpu-002
    assert not evs["gpu-003"].reachable and "no source answered" in evs["gpu-003"].error
    reports = {r.node: r for r in judge(evs.values(), load_thresholds(), NOW)}
    # facts neither source has for a node are UNKNOWN there, never OK
    assert {v.code for v in reports["gpu-001"].verdicts if v.status.value == "UNKNOWN"} == {
        "gpu-nvlink",
        "slurmd",
    }


def test_both_unreachable_is_unknown_with_both_reasons() -> None:
    evs = collect(
        [Evidence("gpu-001", "prometheus", NOW, reachable=False, error="stale")],
        [Evidence("gpu-001", "ssh", NOW, reachable=False, error="timeout")],
        ["gpu-001"],
    )
    assert not evs["gpu-001"].reachable and evs["gpu-001"].error == "prometheus: stale; ssh: timeout"


def test_kernel_log_xids_beat_last_value_and_join_the_chosen_boot() -> None:
    old = XidEvent(79, gpu=1, time=NOW - 7200, boot_id="5c0ffee-previous")
    now_ = XidEvent(48, gpu=0, time=NOW - 60, boot_id="5c0ffee-gpu-001")
    (ev,) = collect(
        [prom("gpu-001", xid_mode="last-value", xids=[XidEvent(45, gpu=1)])],
        [ssh("gpu-001", xids=[old, now_])],
        ["gpu-001"],
    ).values()
    assert ev.xid_mode == "kernel-log" and ev.raw["origin"]["xids"] == "ssh"
    # the boot id is Prometheus's; SSH's events of its current boot are relabelled to it, earlier
    # boots' stay different (and are history to the XID check)
    assert ev.boot_id == "boot-100"
    assert [(e.xid, e.boot_id) for e in ev.xids] == [(79, "5c0ffee-previous"), (48, "boot-100")]
    # last-value is taken when no source has more
    last_value = prom("gpu-001", xid_mode="last-value", xids=[XidEvent(45)])
    (only,) = collect([last_value], [ssh("gpu-001", xids=None)], ["gpu-001"]).values()
    assert only.xid_mode == "last-value"


def test_a_gpu_with_another_uuid_is_not_merged() -> None:
    other = ssh("gpu-001")
    other.gpus[0].uuid = "GPU-replaced"
    (ev,) = collect([prom("gpu-001")], [other], ["gpu-001"]).values()
    assert ev.gpus[0].nvlink_links_down is None and ev.gpus[1].nvlink_links_down == 0


def test_a_source_that_cannot_run_leaves_the_other_and_both_failing_raises() -> None:
    evs = collect(Unreachable("prometheus at http://x unreachable"), [ssh("gpu-001")], ["gpu-001"])
    assert evs["gpu-001"].reachable and evs["gpu-001"].raw["errors"] == {
        "prometheus": "prometheus at http://x unreachable"
    }
    with pytest.raises(Unreachable, match="prometheus"):
        collect(Unreachable("prometheus down"), Unreachable("ssh down"), ["gpu-001"])


def test_make_source_builds_composites_and_refuses_bad_names() -> None:
    ctx = HealthContext(health=HealthSection(), prometheus_url="http://127.0.0.1:1")
    src = make_source(ctx, "prometheus+ssh")
    assert isinstance(src, CompositeSource) and src.name == "prometheus+ssh"
    assert [s.name for s in src.sources] == ["prometheus", "ssh"]
    assert src.sources[0].xid_window_seconds == 3600  # type: ignore[attr-defined]
    for bad in ("prometheus+prometheus", "prometheus+", "prometheus+bogus"):
        with pytest.raises(UsageError):
            make_source(ctx, bad)
