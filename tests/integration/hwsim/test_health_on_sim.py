"""The consumer's view: the health checks, reading the sim's Prometheus, judge injected faults.

Guards the contract between the emulated exporters (names, labels, the `node` target label) and
opsctl.evidence.prometheus; a renamed series or label would turn a FAIL into OK or UNKNOWN here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from opsctl.checks import Status, judge, load_thresholds
from opsctl.evidence.prometheus import PrometheusSource
from opsctl.sim import monitoring
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration


def test_faults_on_the_sim_are_judged_per_node(make_sim: Callable[[int], SimCluster]) -> None:
    sim = make_sim(5)
    info = monitoring.load_info(sim)
    assert info is not None
    monitoring.inject(sim, "gpu-001", "xid=79,gpu=3")
    monitoring.inject(sim, "gpu-002", "ecc_dbe,gpu=1")
    monitoring.inject(sim, "gpu-003", "ib_down=mlx5_2")
    monitoring.inject(sim, "gpu-004", "exporter_down")
    source, thresholds = PrometheusSource(info.prometheus_url), load_thresholds()
    expected = {
        "gpu-001": (Status.FAIL, {"gpu-xid"}),
        "gpu-002": (Status.FAIL, {"gpu-xid", "gpu-ecc-dbe", "gpu-row-remap"}),
        "gpu-003": (Status.FAIL, {"ib-port"}),  # its link_downed too: ib-port's (ib-errors judges ports up)
        "gpu-004": (Status.UNKNOWN, {"evidence"}),
        "gpu-005": (Status.OK, set()),
    }
    seen: dict[str, tuple[Status, set[str]]] = {}
    deadline = time.monotonic() + 90  # scrapes every 5 s; the down target's series must go stale
    while time.monotonic() < deadline:
        reports = judge(source.collect(sim.node_names, time.time()), thresholds, time.time())
        seen = {r.node: (r.status, {v.code for v in r.problems}) for r in reports}
        if seen == expected:
            break
        time.sleep(2)
    assert seen == expected
