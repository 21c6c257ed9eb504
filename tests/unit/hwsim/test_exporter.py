"""The metrics exporter over real HTTP, parsed with prometheus_client's text parser, serving the
dcgm role's counters file as rendered for the pinned DCGM (tests/golden/production/dcgm-counters.csv,
kept equal to the real render by tests/unit/ansible/test_dcgm_role.py)."""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opsctl.hwsim.collectors import CollectorsError, Counter
from opsctl.hwsim.exporter import MultiExporter, NodeSpec, main, parse_node
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.metrics import (
    XID_COUNT,
    dcgm_families,
    families,
    filesystem_families,
    go_float,
    load_collectors,
    node_families,
    parse_collectors,
    render_text,
)
from opsctl.hwsim.render_dmesg import render_dmesg
from opsctl.hwsim.state import NodeHardware, ensure_node, load, make_node, save, state_path

NODES = ["gpu-001", "gpu-002", "gpu-003"]
SHIPPED = Path(__file__).resolve().parents[2] / "golden" / "production" / "dcgm-counters.csv"


@pytest.fixture(scope="module")
def shipped() -> list[Counter]:
    return load_collectors(SHIPPED)


@pytest.fixture
def exporter(tmp_path: Path, shipped: list[Counter]) -> Iterator[MultiExporter]:
    exp = MultiExporter(tmp_path, [NodeSpec(n) for n in NODES], counters=shipped)
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


def _text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_each_node_has_a_dcgm_and_a_node_exporter_port(
    exporter: MultiExporter, fixtures: Path, shipped: list[Counter]
) -> None:
    ports = exporter.ports()
    assert sorted(ports) == NODES and all(set(p) == {"dcgm", "node"} for p in ports.values())
    assert len({p for node in ports.values() for p in node.values()}) == 6
    series = _scrape(ports["gpu-002"]["dcgm"])
    temps = series["DCGM_FI_DEV_GPU_TEMP"]
    assert sorted(int(labels["gpu"]) for labels, _ in temps) == list(range(8))
    # The label names of a genuine dcgm-exporter scrape, minus its MIG and Kubernetes labels and
    # minus DCGM_FI_DRIVER_VERSION: that label comes from a `label` row the shipped file does not have.
    genuine = (fixtures / "dcgm-exporter.metrics.h100-mig.excerpt.issue512.prom").read_text()
    fam = next(iter(text_string_to_metric_families(genuine)))
    genuine_labels = set(fam.samples[1].labels) - {"GPU_I_PROFILE", "GPU_I_ID", "DCGM_FI_DRIVER_VERSION"}
    assert all(set(labels) == genuine_labels for labels, _ in temps)
    assert {labels["Hostname"] for labels, _ in temps} == {"gpu-002"}
    assert {labels["modelName"] for labels, _ in temps} == {"NVIDIA H200"}
    # exactly the counters file's fields, eight series each; nothing of node_exporter's here
    assert set(series) == {c.field for c in shipped}
    assert all(len(v) == 8 for k, v in series.items() if k != XID_COUNT)
    # no XID in the window: one zero series per GPU without an xid label, as upstream's collector
    xids = series[XID_COUNT]
    assert sorted(int(labels["gpu"]) for labels, _ in xids) == list(range(8))
    assert all("xid" not in labels and labels["window_size_in_ms"] == "300000" for labels, _ in xids)
    assert {v for _, v in xids} == {0.0}
    free = {labels["gpu"]: v for labels, v in series["DCGM_FI_DEV_FB_FREE"]}
    assert free["0"] == 143771 - 551
    node = _scrape(ports["gpu-002"]["node"])
    # node_exporter's own families, and the textfile collector's serving of the role's boot id file
    assert node and all(name.startswith("node_") for name in node if name != "opsctl_boot_id_info")
    ((labels, value),) = node["opsctl_boot_id_info"]
    assert (set(labels), value) == ({"boot_id"}, 1.0)


def test_the_shipped_file_gives_dcgm_3_names_and_its_own_help(exporter: MultiExporter) -> None:
    text = _text(exporter.ports()["gpu-001"]["dcgm"])
    # DCGM 3.3 (the pinned version): the throttle-reasons name, no recovery action, no page retirement
    assert "\nDCGM_FI_DEV_CLOCK_THROTTLE_REASONS{" in text
    for absent in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
                   "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_FB_RESERVED"):  # fmt: skip
        assert absent not in text, absent
    # type and help come from the counters file, as dcgm-exporter prints them
    assert "# HELP DCGM_FI_DEV_GPU_TEMP GPU die temperature in C\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" in text
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n" in text
    # the XID collector keeps its own help and gauge type whatever the file says
    assert f"# TYPE {XID_COUNT} gauge\n" in text and "(see xid-count-window-size param)" in text


def test_a_file_without_the_xid_count_serves_only_the_last_xid(shipped: list[Counter]) -> None:
    lacking = [c for c in shipped if c.field != XID_COUNT]
    node = make_node("gpu-011")
    apply_fault(node, "xid=79,gpu=2")
    fams = {f.name: f for f in dcgm_families(node, lacking)}
    assert XID_COUNT not in fams
    assert {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}["2"] == 79


def test_label_rows_become_labels_of_every_series() -> None:
    rows = parse_collectors(
        "# a site's file\nDCGM_FI_DEV_GPU_TEMP, gauge, temp\n DCGM_FI_DRIVER_VERSION , label , Driver\n"
        f"{XID_COUNT}, gauge, xids\n"
    )
    node = make_node("gpu-012")
    fams = dcgm_families(node, rows)
    assert [f.name for f in fams] == ["DCGM_FI_DEV_GPU_TEMP", XID_COUNT]
    assert all(s.labels["DCGM_FI_DRIVER_VERSION"] == node.driver_version for f in fams for s in f.samples)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge\n", "want 'field, type, help', got 2 fields"),
        ("DCGM_FI_DEV_GPU_TEMP, summary, t\n", "type 'summary' is not one of gauge, counter, label"),
        ("DCGM_FI_DEV_NO_SUCH_FIELD, gauge, t\n", "unknown field 'DCGM_FI_DEV_NO_SUCH_FIELD'"),
    ],
)
def test_a_file_dcgm_exporter_would_refuse_is_refused(text: str, message: str) -> None:
    with pytest.raises(CollectorsError, match=message):
        parse_collectors(text, "x.csv")


def test_the_cli_refuses_a_bad_counters_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "counters.csv"
    bad.write_text("DCGM_FI_DEV_NO_SUCH_FIELD, gauge, t\n")
    rc = main(["--state-dir", str(tmp_path), "--node", "gpu-001", "--collectors", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "unknown field 'DCGM_FI_DEV_NO_SUCH_FIELD'" in err
    rc = main(["--state-dir", str(tmp_path), "--node", "gpu-001", "--collectors", str(tmp_path / "nope")])
    assert rc == 2 and "No such file" in capsys.readouterr().err


def test_parse_node_gives_the_two_ports() -> None:
    assert parse_node("gpu-001") == NodeSpec("gpu-001", 0, 0)
    assert parse_node("gpu-001=9400") == NodeSpec("gpu-001", 9400, 0)
    assert parse_node("gpu-001=9400,9100") == NodeSpec("gpu-001", 9400, 9100)
    for bad in ("=1", "gpu-001=x", "gpu-001=1,2,3"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_node(bad)


def test_the_last_xid_is_sticky_while_the_count_leaves_the_window(shipped: list[Counter]) -> None:
    node = make_node("gpu-013")
    apply_fault(node, "xid=79,gpu=4")
    t = node.xids[0].time

    def at(now: float) -> tuple[float, dict[str, float]]:
        fams = {f.name: f for f in dcgm_families(node, shipped, now=now)}
        last = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}["4"]
        counts = {s.labels.get("xid", ""): s.value for s in fams[XID_COUNT].samples if s.labels["gpu"] == "4"}
        return last, counts

    assert at(t + 10) == (79, {"79": 1.0})
    # a day later the 5-minute count is back to its zero series; the last-XID gauge still says 79
    assert at(t + 86400) == (79, {"": 0.0})
    apply_fault(node, "reboot")
    assert at(time.time() + 1) == (0, {"": 0.0})


def test_infiniband_series_like_node_exporter(exporter: MultiExporter, tmp_path: Path) -> None:
    port = exporter.ports()["gpu-001"]["node"]
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
    port = exporter.ports()["gpu-003"]["dcgm"]
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
    # The recovery action the driver asks for (DCGM field 1523, DCGM >= 4.5): a reboot for 79, a
    # reset for 48; the pinned DCGM 3 does not export it.
    assert "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION" not in series
    hw = load(state_path(tmp_path, "gpu-003"))
    fams = {f.name: f for f in families(hw)}  # every field the simulator models
    action = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"].samples}
    assert (action["3"], action["1"], action["0"]) == (2, 1, 0)
    # The other nodes are untouched.
    assert {v for _, v in _scrape(exporter.ports()["gpu-001"]["dcgm"])[XID_COUNT]} == {0.0}


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
    ports = exporter.ports()["gpu-002"]
    _edit(tmp_path, "gpu-002", "exporter_down=dcgm")
    _until(lambda: _probe(ports["dcgm"]) == "refused", "dcgm port closed after exporter_down=dcgm")
    assert _probe(ports["node"]) == "ok"  # its node_exporter is another process: still serving
    assert _scrape(exporter.ports()["gpu-001"]["dcgm"])  # the others keep serving
    _edit(tmp_path, "gpu-002", "exporter_down=node")
    _until(lambda: _probe(ports["node"]) == "refused", "node port closed after exporter_down=node")
    hw = load(state_path(tmp_path, "gpu-002"))
    hw.dcgm_exporter_up = hw.node_exporter_up = True
    save(hw, state_path(tmp_path, "gpu-002"))
    _until(lambda: _probe(ports["dcgm"]) == "ok" and _probe(ports["node"]) == "ok", "ports reopened")
    assert len(_scrape(ports["dcgm"])["DCGM_FI_DEV_GPU_TEMP"]) == 8


def test_only_one_exporter_down_drops_only_its_series(node: NodeHardware) -> None:
    apply_fault(node, "exporter_down=dcgm")
    names = {f.name for f in families(node)}
    assert names and all(n.startswith("node_") for n in names - {"opsctl_boot_id_info"})
    assert {"node_boot_time_seconds", "node_infiniband_state_id", "opsctl_boot_id_info"} <= names
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
    port = exporter.ports()["gpu-001"]["dcgm"]
    state_path(tmp_path, "gpu-001").write_text("{not json")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert err.value.code == 500
    assert _scrape(exporter.ports()["gpu-002"]["dcgm"])


def test_single_node_mode_on_the_shims_state_file(tmp_path: Path, shipped: list[Counter]) -> None:
    """The lab form: one node, the same state file the tool shims read, only dcgm-exporter served
    (the lab's machines run the real node_exporter)."""
    state = tmp_path / "state.json"
    exp = MultiExporter(tmp_path, [NodeSpec("gpu-044")], state_file=state, counters=shipped, serve=["dcgm"])
    exp.start()
    try:
        assert state.exists() and not state_path(tmp_path, "gpu-044").exists()
        hw = load(state)
        apply_fault(hw, "gpu_missing=0")
        save(hw, state)
        assert exp.ports() == {"gpu-044": {"dcgm": exp.ports()["gpu-044"]["dcgm"]}}
        assert len(_scrape(exp.ports()["gpu-044"]["dcgm"])["DCGM_FI_DEV_GPU_TEMP"]) == 7
    finally:
        exp.stop()
    with pytest.raises(ValueError):
        MultiExporter(tmp_path, [NodeSpec("a"), NodeSpec("b")], state_file=state, counters=shipped)
    with pytest.raises(ValueError):
        MultiExporter(tmp_path, [NodeSpec("a")], counters=shipped, serve=["dcgm", "ipmi"])


def test_filesystems_and_nfs_like_node_exporter(node: NodeHardware) -> None:
    fams = {f.name: f for f in node_families(node, now=node.boot_time + 100)}
    sizes = {s.labels["mountpoint"]: s for s in fams["node_filesystem_size_bytes"].samples}
    assert sorted(sizes) == ["/", "/home", "/lustre/scratch", "/scratch", "/shared"]
    assert {k: s.labels["fstype"] for k, s in sizes.items()} == {
        "/": "ext4", "/home": "nfs4", "/lustre/scratch": "lustre", "/scratch": "xfs", "/shared": "nfs4"
    }  # fmt: skip
    assert all(set(s.labels) == {"device", "fstype", "mountpoint"} for s in sizes.values())
    avail = {s.labels["mountpoint"]: s.value for s in fams["node_filesystem_avail_bytes"].samples}
    free = {s.labels["mountpoint"]: s.value for s in fams["node_filesystem_free_bytes"].samples}
    assert all(0 < avail[m] <= free[m] < sizes[m].value for m in sizes)
    assert avail["/"] < free["/"]  # ext4 keeps blocks for root
    # a shared file system reads the same from every node; a local one is the node's own
    other = {s.labels["mountpoint"]: s.value for s in filesystem_families(make_node("gpu-042"))[0].samples}
    assert other["/shared"] == avail["/shared"] and other["/scratch"] != avail["/scratch"]
    (rpcs,) = fams["node_nfs_rpcs_total"].samples
    assert rpcs.value == 4000 and rpcs.labels == {}
    later = {f.name: f for f in node_families(node, now=node.boot_time + 200)}
    assert later["node_nfs_rpcs_total"].samples[0].value == 8000


def test_a_scraper_that_hangs_up_is_routine_not_a_traceback(
    exporter: MultiExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """Prometheus past its scrape timeout closes the connection mid-answer; the exporter says
    nothing about it (as the real one does) and keeps serving."""
    port = exporter.ports()["gpu-001"]["dcgm"]
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            # close with a reset (linger 0) before the answer is read
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.5)  # let the handler threads reach their writes
    assert "DCGM_FI_DEV_GPU_TEMP" in _text(port)
    assert "Traceback" not in capsys.readouterr().err
