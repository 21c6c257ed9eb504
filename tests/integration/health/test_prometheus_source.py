"""PrometheusSource on the simulated cluster: the hwsim exporters (dcgm-exporter and node_exporter
series as the real ones serve them) scraped every 5 s by a real Prometheus, a real slurmctld for
the node list. The emulated dcgm-exporter runs with a 10 s XID count window (its
--xid-count-window-size), so "an XID older than the exporter's window" takes seconds, not 5 minutes,
and with the dcgm role's counters file for DCGM 4.5 (the first release with the recovery action).
Every node's HCAs are those of the genuine H100 sample: eight NDR InfiniBand ports beside four
Ethernet ports (three of them down), with the InfiniBand ones as the inventory's fabric HCAs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from promlab import free_port, heal_all, rescraped, wait_until

from opsctl.checks import NodeReport, judge
from opsctl.checks.settings import HealthSection
from opsctl.config import load_config
from opsctl.errors import Unreachable
from opsctl.evidence.model import Evidence
from opsctl.evidence.prometheus import PrometheusSource
from opsctl.hwsim.state import load, state_path
from opsctl.remediation.proof import resume_proof
from opsctl.remediation.state import Latch
from opsctl.sim import monitoring
from opsctl.sim.addons import register_addon
from opsctl.sim.cluster import SimCluster

pytestmark = pytest.mark.integration  # about 90 s on 2 cores

NEEDED = ("munged", "slurmctld", "slurmd", "sinfo", "prometheus")
XID_WINDOW_MS = 10_000
DCGM_WITH_RECOVERY_ACTION = "4.5.3"
ADDON = "monitoring-xid10s-dcgm45-h100"
LAYOUT = "h100-ndr8-eth4"
FABRIC = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    missing = [p for p in NEEDED if shutil.which(p) is None]
    if missing:
        pytest.fail(f"needs {missing} (scripts/bootstrap.sh installs them)", pytrace=False)
    register_addon(
        ADDON,
        lambda: monitoring.MonitoringAddon(
            xid_window_ms=XID_WINDOW_MS, dcgm_version=DCGM_WITH_RECOVERY_ACTION, hca_layout=LAYOUT
        ),
    )
    # a short path: munge's socket lives inside and unix socket paths are limited to 107 bytes
    state_dir = Path(tempfile.mkdtemp(prefix="psrc", dir="/tmp"))
    cluster = SimCluster(nodes=4, state_dir=state_dir, addons=[ADDON])
    try:
        cluster.up()
        yield cluster
    finally:
        try:
            cluster.down()
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


def url(sim: SimCluster) -> str:
    info = monitoring.load_info(sim)
    assert info is not None
    return info.prometheus_url


def source(sim: SimCluster, **kw: Any) -> PrometheusSource:
    return PrometheusSource(url(sim), stale_after=15.0, window_seconds=60, **kw)


def evidence(sim: SimCluster, node: str, **kw: Any) -> Evidence:
    (ev,) = source(sim, **kw).collect([node], time.time())
    return ev


def problems(sim: SimCluster, **kw: Any) -> dict[str, tuple[str, list[str]]]:
    th = HealthSection(ib_devices=FABRIC).load_thresholds()  # what the sim's opsctl.toml says
    reports = judge(source(sim, **kw).collect(sim.node_names, time.time()), th, time.time())
    return {
        r.node: (r.status.value, sorted(f"{v.code}:{v.status.value}" for v in r.problems)) for r in reports
    }


def instant(sim: SimCluster, query: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(f"{url(sim)}/api/v1/query?{q}", timeout=10) as resp:
        return list(json.loads(resp.read())["data"]["result"])


def test_a_dcgm_4_exporter_named_localhost_by_the_roles_flags_reaches_prometheus_as_its_node(sim) -> None:
    # The dcgm role's unit passes --remote-hostengine-info localhost:5555; a 4.x exporter then names
    # every node "localhost" (the emulator follows the release's source). The prometheus role's
    # relabel puts the node's own name back, so each node's series are its own.
    info = monitoring.load_info(sim)
    assert info is not None
    unit = Path(info.counters_file).parent / "dcgm-exporter.service"
    assert "--remote-hostengine-info localhost:5555" in unit.read_text()
    port = info.exporter_ports[sim.node_names[0]]["dcgm"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        raw = resp.read().decode()
    assert 'Hostname="localhost"' in raw and f'Hostname="{sim.node_names[0]}"' not in raw
    series = instant(sim, "count by (Hostname, instance) (DCGM_FI_DEV_GPU_TEMP)")
    assert {(s["metric"]["Hostname"], s["metric"]["instance"]) for s in series} == {
        (n, n) for n in sim.node_names
    }
    assert {s["value"][1] for s in series} == {"8"}


def _booted_as_healed(sim: SimCluster) -> bool:
    """Every node's boot time in Prometheus is its state file's (a heal is a new boot, and
    node_exporter's target is scraped apart from dcgm-exporter's)."""
    want = {n: float(int(load(state_path(monitoring.hw_dir(sim), n)).boot_time)) for n in sim.node_names}
    return all(ev.boot_time == want[ev.node] for ev in source(sim).collect(sim.node_names, time.time()))


HEALED: dict[str, float] = {}  # the module's sim -> when the last test's teardown healed its nodes


@pytest.fixture
def healed(sim: SimCluster) -> Iterator[SimCluster]:
    since = HEALED.get(str(sim.state_dir))
    wait_until(lambda: rescraped(sim, since) and all(p == ("OK", []) for p in problems(sim).values()),
               timeout=60, interval=1)
    wait_until(lambda: _booted_as_healed(sim), timeout=30, interval=1)
    yield sim
    HEALED[str(sim.state_dir)] = heal_all(sim)


def test_node_exporter_down_on_one_node_is_unknown_for_its_families_not_fail(healed: SimCluster) -> None:
    sim = healed
    before = evidence(sim, "gpu-002")
    assert before.boot_kind == "kernel" and before.ib_ports and before.xid_mode == "count"
    monitoring.inject(sim, "gpu-002", "exporter_down=node")
    want = {
        "gpu-001": ("OK", []),
        "gpu-002": ("UNKNOWN", ["ib-errors:UNKNOWN", "ib-port:UNKNOWN"]),
        "gpu-003": ("OK", []),
        "gpu-004": ("OK", []),
    }
    got = wait_until(lambda: (p := problems(sim)) == want and p, timeout=40, interval=1)
    assert got == want  # never FAIL "no InfiniBand port", and the GPU checks still judge the node
    ev = evidence(sim, "gpu-002")
    assert (ev.ib_ports, ev.boot_id, ev.boot_time, ev.gpu_count) == (None, "", None, 8)


def test_an_xid_older_than_the_exporter_window_but_inside_the_policy_window_still_fails(
    healed: SimCluster,
) -> None:
    sim = healed
    t0 = time.time()
    monitoring.inject(sim, "gpu-003", "xid=79,gpu=5")
    counted = 'DCGM_EXP_XID_ERRORS_COUNT{Hostname="gpu-003",xid="79"}'
    wait_until(lambda: instant(sim, counted), timeout=30, interval=1)
    # dcgm-exporter's own window (10 s) lets go of it: the exporter now serves the zero series only
    wait_until(lambda: not instant(sim, counted), timeout=40, interval=1)
    assert instant(sim, 'DCGM_EXP_XID_ERRORS_COUNT{Hostname="gpu-003",gpu="5"}')[0]["value"][1] == "0"
    # the recovery check runs on this source where the exporter serves field 1523 (DCGM 4.5): the
    # GPU off the bus has the driver ask for a node reboot
    assert problems(sim)["gpu-003"] == ("FAIL", ["gpu-recovery:FAIL", "gpu-xid:FAIL"])
    (e,) = evidence(sim, "gpu-003").xids or []
    assert (e.xid, e.gpu, e.count) == (79, 5, 1)
    # stamped with the last scrape that still counted it: after the event, within the exporter window
    assert e.time is not None and t0 <= e.time <= t0 + XID_WINDOW_MS / 1000 + 10
    # a policy window shorter than the time since then has no count of it; but XID 79 is fixed only
    # by a reboot, and the last-XID gauge keeps it until the driver reloads: it still FAILs, from the
    # gauge, and the driver still asks for the reboot, whatever the window
    time.sleep(max(0.0, e.time + 6 - time.time()))
    th = HealthSection(ib_devices=FABRIC).load_thresholds()
    (report,) = judge(source(sim, xid_window_seconds=5).collect(["gpu-003"], time.time()), th, time.time())
    assert [(v.code, v.status.value, v.gpu, v.evidence.get("action")) for v in report.problems] == [
        ("gpu-xid", "FAIL", 5, "reboot"), ("gpu-recovery", "FAIL", 5, "reboot")
    ]
    assert "the last-XID gauge shows it, no count in the window does" in report.problems[0].summary


def test_a_reboot_is_a_new_boot_id_and_clears_the_recovery_action(healed: SimCluster) -> None:
    sim = healed
    before = evidence(sim, "gpu-004")
    monitoring.inject(sim, "gpu-004", "xid=79,gpu=2")
    faulty = wait_until(lambda: (ev := evidence(sim, "gpu-004")).gpus[2].recovery_action == "reboot" and ev)
    assert faulty.boot_id == before.boot_id and [g.recovery_action for g in faulty.gpus].count("none") == 7
    monitoring.inject(sim, "gpu-004", "reboot")
    # node_exporter (the boot time) and dcgm-exporter (the recovery action) are separate targets,
    # scraped apart as in production: wait for both to show the new boot
    after = wait_until(
        lambda: (ev := evidence(sim, "gpu-004")).boot_id != before.boot_id
        and {g.recovery_action for g in ev.gpus} == {"none"}
        and ev,
        timeout=30,
    )
    assert after.boot_time is not None and before.boot_time is not None and after.boot_time > before.boot_time
    assert {g.recovery_action for g in after.gpus} == {"none"} and after.gpu_count == 8
    # the XID is still in the policy window, but was last counted before this boot: history
    (e,) = after.xids or []
    assert e.xid == 79 and e.time is not None and e.time < after.boot_time
    assert e.boot_id == f"before-{after.boot_id}"
    assert problems(sim)["gpu-004"] == ("OK", [])
    assert sim.slurmd_running("gpu-004")


def test_a_clock_step_is_not_a_reboot_and_a_reboot_is(healed: SimCluster) -> None:
    """node_exporter serves the kernel's boot_id (the role's textfile metric): a stepped clock moves
    the boot time and proves no reboot, for a latch on either kind of boot id; a reboot does."""
    sim = healed
    th = HealthSection(ib_devices=FABRIC).load_thresholds()

    def report() -> NodeReport:
        (r,) = judge(source(sim).collect(["gpu-002"], time.time()), th, time.time())
        return r

    before = report()
    assert before.boot_kind == "kernel" and before.boot_time is not None
    assert before.boot_id == load(state_path(monitoring.hw_dir(sim), "gpu-002")).boot_id
    drained = {"reason": "opsctl:health:gpu-xid:x", "time": time.time(), "code": "gpu-xid"}
    drained["action"] = "reboot"
    kernel = Latch(**drained, boot_id=before.boot_id, boot_kind=before.boot_kind)
    btime = Latch(**drained, boot_id=f"boot-{int(before.boot_time)}")  # a latch of an older state file
    monitoring.inject(sim, "gpu-002", "clock_step=30")
    stepped = wait_until(lambda: (r := report()).boot_time == before.boot_time + 30 and r, timeout=20)
    assert (stepped.boot_id, stepped.boot_kind) == (before.boot_id, "kernel")
    assert resume_proof(kernel, stepped) == (False, "waiting for a reboot: boot id unchanged since the drain")
    proven, why = resume_proof(btime, stepped)
    assert not proven and "clock step" in why
    monitoring.inject(sim, "gpu-002", "reboot")
    after = wait_until(lambda: (r := report()).boot_id != before.boot_id and r, timeout=20)
    # (the boot-time latch is not asked here: this sim node may have booted, healed, under 60 s ago)
    assert after.boot_kind == "kernel" and resume_proof(kernel, after)[0]


def test_a_gpu_reset_clears_its_recovery_action_and_pending_remap_within_the_boot(healed: SimCluster) -> None:
    sim = healed
    monitoring.inject(sim, "gpu-001", "ecc_dbe,gpu=1")
    monitoring.inject(sim, "gpu-001", "thermal,gpu=6")
    faulty = wait_until(lambda: (ev := evidence(sim, "gpu-001")).gpus[1].recovery_action == "reset" and ev)
    assert faulty.gpus[1].remap_pending is True and faulty.gpus[1].ecc_dbe_volatile == 1
    assert [g.index for g in faulty.gpus if g.thermal_throttle] == [6]
    monitoring.inject(sim, "gpu-001", "gpu_reset,gpu=1")
    reset = wait_until(lambda: (ev := evidence(sim, "gpu-001")).gpus[1].recovery_action == "none" and ev)
    g = reset.gpus[1]
    assert (g.remap_pending, g.ecc_dbe_volatile, reset.boot_id) == (False, 0, faulty.boot_id)
    assert reset.gpus[6].thermal_throttle is True  # another GPU's fault is not touched by the reset


def test_coverage_through_the_real_binary(healed: SimCluster, run_opsctl: Any) -> None:
    sim = healed
    cfg = str(sim.config_path)

    def cover(*args: str) -> tuple[int, dict[str, Any]]:
        proc = run_opsctl("--config", cfg, "health", "--coverage", "--json", *args)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    rc, doc = cover()
    checks = {c["code"]: c for c in doc["checks"]}
    assert rc == 0 and doc["ok"] and doc["source"] == "prometheus" and doc["nodes"] == 4
    assert doc["xid_modes"] == {"count": sim.node_names} and not doc["last_value_xids"]
    for code in ("gpu-count", "gpu-xid", "gpu-ecc-dbe", "gpu-row-remap"):
        assert checks[code]["required"] and checks[code]["status"] == "all", code
    assert checks["ib-port"]["status"] == "all" and checks["mount"]["status"] == "none"
    assert checks["gpu-recovery"]["status"] == "all"  # DCGM 4.5's exporter serves field 1523
    monitoring.inject(sim, "gpu-003", "exporter_down=node")

    def ib_port() -> dict[str, Any]:
        return next(c for c in cover()[1]["checks"] if c["code"] == "ib-port")

    assert wait_until(lambda: (c := ib_port())["status"] == "some" and c, timeout=40)["lacking"] == [
        "gpu-003"
    ]
    rc, doc = cover()
    checks = {c["code"]: c for c in doc["checks"]}
    assert rc == 0 and checks["ib-errors"]["lacking"] == ["gpu-003"]
    assert doc["nodes_lacking_required"] == {}  # the required checks are all GPU facts: still there
    # a required check this source cannot evaluate anywhere: exit 1, and the table says which
    sim.set_config("health", required_checks=["gpu-xid", "slurmd"])
    try:
        rc, doc = cover()
        assert rc == 1 and doc["missing_required"] == ["slurmd"]
        table = run_opsctl("--config", cfg, "health", "--coverage")
        assert table.returncode == 1 and "required checks without evidence: slurmd" in table.stdout
        bad = run_opsctl("--config", cfg, "health", "--coverage", "--remediate")
        assert bad.returncode == 2 and bad.stderr.startswith("opsctl: error:")
    finally:
        sim.set_config("health", required_checks=["gpu-count", "gpu-xid", "gpu-ecc-dbe", "gpu-row-remap"])


def test_ethernet_ports_beside_the_fabric_fail_nothing_and_a_fabric_port_down_fails_its_node(
    healed: SimCluster,
) -> None:
    sim = healed
    # node_exporter serves the Ethernet ports as InfiniBand-class series with no link layer ...
    down = instant(sim, "node_infiniband_state_id != 4")
    assert {(s["metric"]["instance"], s["metric"]["device"]) for s in down} == {
        (n, d) for n in sim.node_names for d in ("mlx5_2", "mlx5_7", "mlx5_8")
    }
    # ... and the prometheus role's relabelling marks the inventory's fabric HCAs, which the rules watch
    fabric = instant(sim, 'node_infiniband_state_id{fabric="infiniband"}')
    assert sorted(s["metric"]["device"] for s in fabric) == sorted(FABRIC * len(sim.node_names))
    rule = 'node_infiniband_state_id{fabric="infiniband"} != 4'  # InfinibandPortNotActive
    assert instant(sim, rule) == []
    # the sim's opsctl.toml names them as the opsctl_remediation role renders them
    assert load_config(sim.config_path).section("health", HealthSection).ib_devices == FABRIC
    node = sim.node_names[1]
    monitoring.inject(sim, node, "ib_down=mlx5_9")
    want = {n: ("OK", []) for n in sim.node_names}
    want[node] = ("FAIL", ["ib-port:FAIL"])  # its link_downed grew: ib-port's, not ib-errors' (port down)
    wait_until(lambda: problems(sim) == want, timeout=30, interval=1)
    fired = [(s["metric"]["instance"], s["metric"]["device"]) for s in instant(sim, rule)]
    assert fired == [(node, "mlx5_9")]


def test_unknown_node_is_unknown_and_unreachable_prometheus_raises(sim: SimCluster) -> None:
    (ev,) = source(sim).collect(["gpu-999"], time.time())
    assert not ev.reachable and "no dcgm-exporter series" in ev.error
    with pytest.raises(Unreachable):
        PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout=2).collect(["gpu-001"], time.time())
