"""PrometheusSource against a real Prometheus scraping emulated exporters."""

from __future__ import annotations

import time

import pytest
from promlab import Exporters, NodeHw, prometheus, wait_until

from opsctl.checks import Status, judge, load_thresholds
from opsctl.errors import Unreachable
from opsctl.evidence.prometheus import PrometheusSource

pytestmark = pytest.mark.integration

NODES = [f"gpu-{i:03d}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def lab():
    hw = [NodeHw(n, hostname_label="hostname" if i % 2 else "Hostname") for i, n in enumerate(NODES)]
    exporters = Exporters(hw)
    try:
        with prometheus(exporters) as url:
            yield exporters, url
    finally:
        exporters.close()


def statuses(url: str, stale_after: float = 5.0) -> dict[str, tuple[str, list[str]]]:
    src = PrometheusSource(url, stale_after=stale_after, window_seconds=60)
    reports = judge(src.collect(NODES, time.time()), load_thresholds(), time.time())
    return {r.node: (r.status.value, sorted({v.code for v in r.problems})) for r in reports}


def test_faults_show_on_their_node_only_and_a_dropped_exporter_is_unknown(lab):
    exporters, url = lab
    wait_until(lambda: all(s == ("OK", []) for s in statuses(url).values()))
    # both label spellings (Hostname, hostname) were read: all 8 nodes are OK, none unknown
    with exporters.lock:
        exporters.nodes["gpu-002"].xids[(3, 79)] = 1
        exporters.nodes["gpu-003"].missing_gpus.add(5)
        exporters.nodes["gpu-004"].ib_down.add("mlx5_2")
        exporters.nodes["gpu-005"].remap_failure.add(1)
        exporters.nodes["gpu-006"].exporter_up = False
        exporters.nodes["gpu-007"].ib_counters[("mlx5_1", "link_downed")] = 3
    want = {
        "gpu-001": ("OK", []),
        "gpu-002": ("FAIL", ["gpu-xid"]),
        "gpu-003": ("FAIL", ["gpu-count"]),
        "gpu-004": ("FAIL", ["ib-port"]),
        "gpu-005": ("FAIL", ["gpu-row-remap"]),
        "gpu-006": ("UNKNOWN", ["evidence"]),
        "gpu-007": ("FAIL", ["ib-errors"]),
        "gpu-008": ("OK", []),
    }
    got = wait_until(lambda: (s := statuses(url)) == want and s, timeout=30)
    assert got == want


def test_xid_count_series_is_preferred_and_evidence_is_precise(lab):
    exporters, url = lab
    with exporters.lock:
        exporters.nodes["gpu-008"].xids[(6, 48)] = 2
    src = PrometheusSource(url, stale_after=5.0, window_seconds=60)

    def xid_verdict():
        (ev,) = src.collect(["gpu-008"], time.time())
        (report,) = judge([ev], load_thresholds(), time.time())
        return [v for v in report.problems if v.code == "gpu-xid"]

    (v,) = wait_until(xid_verdict)
    assert (v.status, v.gpu, v.evidence["xid"], v.evidence["count"], v.evidence["action"]) == (
        Status.FAIL,
        6,
        48,
        2,
        "reset_gpu",
    )


def test_unknown_node_name_is_unknown_and_unreachable_prometheus_raises(lab):
    _, url = lab
    src = PrometheusSource(url, stale_after=5.0)
    (ev,) = src.collect(["gpu-999"], time.time())
    assert not ev.reachable and "no dcgm-exporter series" in ev.error
    from promlab import free_port

    with pytest.raises(Unreachable):
        PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout=2).collect(NODES, time.time())
