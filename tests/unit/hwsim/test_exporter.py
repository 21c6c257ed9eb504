"""The metrics exporter over real HTTP, parsed with prometheus_client's text parser."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opsctl.hwsim.exporter import MultiExporter
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.metrics import families, go_float, render_text
from opsctl.hwsim.render_dmesg import render_dmesg
from opsctl.hwsim.state import NodeHardware, ensure_node, load, save, state_path

NODES = ["gpu-001", "gpu-002", "gpu-003"]


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[MultiExporter]:
    exp = MultiExporter(tmp_path, [(n, 0) for n in NODES])
    exp.start()
    supervisor = threading.Thread(target=exp.supervise, daemon=True)
    supervisor.start()
    try:
        yield exp
    finally:
        exp.stop()
        supervisor.join(timeout=5)


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    # Keyed by family: prometheus_client's parser renames counter samples to NAME_total (OpenMetrics
    # style) and strips _total from family names; Prometheus itself stores the names as exposed.
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(fam.name, []).append((s.labels, s.value))
    return out


def _until(predicate: object, what: str) -> None:
    """Wait for the exporter's supervisor to act (it polls the state files)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def _probe(port: int) -> str:
    """"refused", "ok", or "other" (e.g. a reset while the socket is being closed: try again)."""
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).close()
    except urllib.error.URLError as exc:
        return "refused" if isinstance(exc.reason, ConnectionRefusedError) else "other"
    except OSError:
        return "other"
    return "ok"


def _edit(tmp_path: Path, node: str, spec: str) -> None:
    state = load(state_path(tmp_path, node))
    apply_fault(state, spec)
    save(state, state_path(tmp_path, node))


def test_each_node_has_its_own_port_with_dcgm_labels(exporter: MultiExporter, fixtures: Path) -> None:
    ports = exporter.ports()
    assert sorted(ports) == NODES and len(set(ports.values())) == 3
    series = _scrape(ports["gpu-002"])
    temps = series["DCGM_FI_DEV_GPU_TEMP"]
    assert sorted(int(labels["gpu"]) for labels, _ in temps) == list(range(8))
    # The label names of a genuine dcgm-exporter scrape (minus its MIG and Kubernetes labels).
    genuine = (fixtures / "dcgm-exporter.metrics.h100-mig.excerpt.issue512.prom").read_text()
    fam = next(iter(text_string_to_metric_families(genuine)))
    genuine_labels = set(fam.samples[1].labels) - {"GPU_I_PROFILE", "GPU_I_ID"}
    assert all(set(labels) == genuine_labels for labels, _ in temps)
    assert {labels["Hostname"] for labels, _ in temps} == {"gpu-002"}
    assert {labels["modelName"] for labels, _ in temps} == {"NVIDIA H200"}
    for name in [
        "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_PCIE_LINK_GEN",
        "DCGM_FI_DEV_PCIE_LINK_WIDTH",
    ]:  # fmt: skip
        assert len(series[name]) == 8, name
    # no XID in the window: one zero series per GPU without an xid label, as upstream's collector
    xids = series["DCGM_EXP_XID_ERRORS_COUNT"]
    assert sorted(int(labels["gpu"]) for labels, _ in xids) == list(range(8))
    assert all("xid" not in labels and labels["window_size_in_ms"] == "300000" for labels, _ in xids)
    assert {v for _, v in xids} == {0.0}
    free = {labels["gpu"]: v for labels, v in series["DCGM_FI_DEV_FB_FREE"]}
    assert free["0"] == 143771 - 551


def test_infiniband_series_like_node_exporter(exporter: MultiExporter, tmp_path: Path) -> None:
    port = exporter.ports()["gpu-001"]
    series = _scrape(port)
    states = {labels["device"]: v for labels, v in series["node_infiniband_state_id"]}
    assert states == {f"mlx5_{i}": 4.0 for i in range(8)}
    assert all(set(labels) == {"device", "port"} for labels, _ in series["node_infiniband_state_id"])
    rates = {v for _, v in series["node_infiniband_rate_bytes_per_second"]}
    assert rates == {50e9}
    hw = load(state_path(tmp_path, "gpu-001"))
    received = {labels["device"]: v for labels, v in series["node_infiniband_port_data_received_bytes"]}
    assert received["mlx5_0"] == hw.hca("mlx5_0").counters["port_rcv_data"] * 4
    _edit(tmp_path, "gpu-001", "ib_down=mlx5_2")
    series = _scrape(port)
    states = {labels["device"]: v for labels, v in series["node_infiniband_state_id"]}
    phys = {labels["device"]: v for labels, v in series["node_infiniband_physical_state_id"]}
    assert (states["mlx5_2"], phys["mlx5_2"], states["mlx5_1"]) == (1.0, 2.0, 4.0)
    downed = {labels["device"]: v for labels, v in series["node_infiniband_link_downed"]}
    assert downed["mlx5_2"] == 1.0 and downed["mlx5_3"] == 0.0


def test_faults_show_on_the_next_scrape(exporter: MultiExporter, tmp_path: Path) -> None:
    port = exporter.ports()["gpu-003"]
    _edit(tmp_path, "gpu-003", "xid=79,gpu=3")
    _edit(tmp_path, "gpu-003", "ecc_dbe,gpu=1")
    _edit(tmp_path, "gpu-003", "gpu_missing=6")
    series = _scrape(port)
    counts = {(labels["gpu"], labels.get("xid")): v for labels, v in series["DCGM_EXP_XID_ERRORS_COUNT"]}
    assert counts == {("3", "79"): 1.0, ("1", "48"): 1.0} | {(g, None): 0.0 for g in "02457"}
    assert all(labels["window_size_in_ms"] == "300000" for labels, _ in series["DCGM_EXP_XID_ERRORS_COUNT"])
    last = {labels["gpu"]: v for labels, v in series["DCGM_FI_DEV_XID_ERRORS"]}
    assert last == {"0": 0, "1": 48, "2": 0, "3": 79, "4": 0, "5": 0, "7": 0}  # GPU 6 has no series
    dbe = {labels["gpu"]: v for labels, v in series["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]}
    assert dbe["1"] == 1 and dbe["0"] == 0
    # The recovery action the driver asks for (DCGM field 1523): a reboot for 79, a reset for 48.
    action = {labels["gpu"]: v for labels, v in series["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"]}
    assert (action["3"], action["1"], action["0"]) == (2, 1, 0)
    # The other nodes are untouched.
    assert {v for _, v in _scrape(exporter.ports()["gpu-001"])["DCGM_EXP_XID_ERRORS_COUNT"]} == {0.0}


def test_xid_count_leaves_the_window(tmp_path: Path) -> None:
    hw = ensure_node(tmp_path, "gpu-009")
    apply_fault(hw, "xid=13")
    hw.xids[0].time = time.time() - 301
    apply_fault(hw, "xid=31")
    fams = {f.name: f for f in families(hw)}
    assert [s.labels["xid"] for s in fams["DCGM_EXP_XID_ERRORS_COUNT"].samples if "xid" in s.labels] == ["31"]
    # dcgm-exporter's --xid-count-window-size: a 10 s window has let both go
    short = {f.name: f for f in families(hw, now=time.time() + 11, xid_window_ms=10000)}
    samples = short["DCGM_EXP_XID_ERRORS_COUNT"].samples
    assert len(samples) == 8
    assert all(s.value == 0 and s.labels["window_size_in_ms"] == "10000" for s in samples)


def test_a_gpu_reset_empties_dcgms_view_but_not_the_kernel_log(node: NodeHardware) -> None:
    apply_fault(node, "ecc_dbe,gpu=2")
    apply_fault(node, "xid=13,gpu=5")
    apply_fault(node, "gpu_reset,gpu=2")
    fams = {f.name: f for f in families(node)}
    xid_samples = fams["DCGM_EXP_XID_ERRORS_COUNT"].samples
    counts = {(s.labels["gpu"], s.labels.get("xid")): s.value for s in xid_samples}
    assert counts[("2", None)] == 0 and counts[("5", "13")] == 1 and ("2", "48") not in counts
    names = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", "DCGM_FI_DEV_ROW_REMAP_PENDING")
    by_gpu = {name: {s.labels["gpu"]: s.value for s in fams[name].samples} for name in names}
    assert [by_gpu[name]["2"] for name in names] == [0, 0, 0] and by_gpu["DCGM_FI_DEV_XID_ERRORS"]["5"] == 13
    assert "NVRM: Xid (PCI:0000:3a:00): 48," in render_dmesg(node)


def test_exporter_down_refuses_connections_and_comes_back(exporter: MultiExporter, tmp_path: Path) -> None:
    port = exporter.ports()["gpu-002"]
    _edit(tmp_path, "gpu-002", "exporter_down")
    _until(lambda: _probe(port) == "refused", "port closed after exporter_down")
    assert _scrape(exporter.ports()["gpu-001"])  # the others keep serving
    hw = load(state_path(tmp_path, "gpu-002"))
    hw.dcgm_exporter_up = hw.node_exporter_up = True
    save(hw, state_path(tmp_path, "gpu-002"))
    _until(lambda: _probe(port) == "ok", "port reopened")
    assert len(_scrape(port)["DCGM_FI_DEV_GPU_TEMP"]) == 8


def test_only_one_exporter_down_drops_only_its_series(node: NodeHardware) -> None:
    apply_fault(node, "exporter_down=dcgm")
    names = {f.name for f in families(node)}
    assert names and all(n.startswith("node_") for n in names)
    assert "node_boot_time_seconds" in names and "node_infiniband_state_id" in names
    apply_fault(node, "exporter_down=node")
    assert families(node) == []


def test_text_is_valid_and_typed_like_the_go_exporters(node: NodeHardware) -> None:
    text = render_text(families(node))
    types = dict(line.split(" ")[2:4] for line in text.splitlines() if line.startswith("# TYPE"))
    assert types["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == "counter"  # no _total, as dcgm-exporter prints it
    assert types["node_infiniband_link_downed_total"] == "counter"
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert parsed["DCGM_FI_DEV_GPU_TEMP"] == "gauge"
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0"' in text and text.count("\n# HELP ") + 1 == len(types)
    power = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    assert power.rsplit(" ", 1)[1] == f"{node.gpu(0).power_draw_w:f}"
    # the stat collector's boot time: /proc/stat's integer btime, no labels, Go's float format
    assert f"\nnode_boot_time_seconds {go_float(float(int(node.boot_time)))}\n" in text
    assert parsed["node_boot_time_seconds"] == "gauge"


@pytest.mark.parametrize(
    ("value", "text"),
    [(36.0, "36"), (71.97, "71.97"), (5e10, "5e+10"), (230539874932483.0, "2.30539874932483e+14"),
     (1e6, "1e+06"), (999999.0, "999999"), (0.0, "0"), (1e-5, "1e-05"), (-2.5, "-2.5")],
)  # fmt: skip
def test_go_float_formatting(value: float, text: str) -> None:
    assert go_float(value) == text


def test_missing_state_gives_500_not_a_crash(exporter: MultiExporter, tmp_path: Path) -> None:
    port = exporter.ports()["gpu-001"]
    state_path(tmp_path, "gpu-001").write_text("{not json")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert err.value.code == 500
    assert _scrape(exporter.ports()["gpu-002"])


def test_single_node_mode_on_the_shims_state_file(tmp_path: Path) -> None:
    """The lab form: one node, the same state file the tool shims read."""
    state = tmp_path / "state.json"
    exp = MultiExporter(tmp_path, [("gpu-044", 0)], state_file=state)
    exp.start()
    try:
        assert state.exists() and not state_path(tmp_path, "gpu-044").exists()
        hw = load(state)
        apply_fault(hw, "gpu_missing=0")
        save(hw, state)
        assert len(_scrape(exp.ports()["gpu-044"])["DCGM_FI_DEV_GPU_TEMP"]) == 7
    finally:
        exp.stop()
    with pytest.raises(ValueError):
        MultiExporter(tmp_path, [("a", 0), ("b", 0)], state_file=state)
