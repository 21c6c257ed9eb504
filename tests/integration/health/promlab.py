"""Test-only simulated monitoring for the health tests: an emulated dcgm-exporter/node_exporter
endpoint per node (real metric names and labels, served over HTTP in the prometheus_client
exposition format) and a real Prometheus scraping them. The hardware is the only simulated thing.
"""

from __future__ import annotations

import contextlib
import http.server
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

IB_COUNTERS = (
    "link_downed",
    "symbol_error",
    "port_errors_received",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_receive_remote_physical_errors",
    "port_discards_transmitted",
)


@dataclass
class NodeHw:
    name: str
    gpus: int = 8
    missing_gpus: set[int] = field(default_factory=set)
    xids: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, xid) -> count in window
    ecc_dbe: dict[int, int] = field(default_factory=dict)
    remap_failure: set[int] = field(default_factory=set)
    ib_down: set[str] = field(default_factory=set)
    ib_counters: dict[tuple[str, str], int] = field(default_factory=dict)
    exporter_up: bool = True
    hostname_label: str = "Hostname"  # dcgm-exporter < 3.3 used Hostname, later hostname
    boot_time: float = field(default_factory=lambda: float(int(time.time()) - 86400))

    def reboot(self) -> None:
        """A new boot: the XIDs go with the old one (the count history stays in Prometheus)."""
        self.xids.clear()
        self.boot_time = float(math.ceil(time.time()))


def render(hw: NodeHw) -> bytes:
    reg = CollectorRegistry()
    gl = ["gpu", "UUID", "device", "modelName", "pci_bus_id", hw.hostname_label]
    temp = Gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", gl, registry=reg)
    xid_last = Gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", gl, registry=reg)
    xid_count = Gauge(
        "DCGM_EXP_XID_ERRORS_COUNT",
        "Count of XID Errors within user-specified time window.",
        [*gl, "window_size_in_ms", "xid"],
        registry=reg,
    )
    dbe = Gauge(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", gl, registry=reg
    )
    remap = Gauge("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", gl, registry=reg)
    gen = Gauge("DCGM_FI_DEV_PCIE_LINK_GEN", "PCIe link generation.", gl, registry=reg)
    width = Gauge("DCGM_FI_DEV_PCIE_LINK_WIDTH", "PCIe link width.", gl, registry=reg)
    reasons = Gauge("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Clock event reasons bitmask.", gl, registry=reg)
    for i in range(hw.gpus):
        if i in hw.missing_gpus:
            continue
        labels = [
            str(i),
            f"GPU-{hw.name}-{i}",
            f"nvidia{i}",
            "NVIDIA H200",
            f"00000000:{0x18 + i:02X}:00.0",
            hw.name,
        ]
        temp.labels(*labels).set(35 + i)
        last = [x for (g, x), n in hw.xids.items() if g == i and n]
        xid_last.labels(*labels).set(last[-1] if last else 0)
        counted = [(x, n) for (g, x), n in hw.xids.items() if g == i]
        for x, n in counted:
            xid_count.labels(*labels, "300000", str(x)).set(n)
        if not counted:
            # dcgm-exporter's zero series of a GPU without XIDs has no xid label; an empty label
            # value is the same thing to Prometheus
            xid_count.labels(*labels, "300000", "").set(0)
        dbe.labels(*labels).set(hw.ecc_dbe.get(i, 0))
        remap.labels(*labels).set(1 if i in hw.remap_failure else 0)
        gen.labels(*labels).set(5)
        width.labels(*labels).set(16)
        reasons.labels(*labels).set(0)
    boot = Gauge("node_boot_time_seconds", "Node boot time, in unixtime.", [hw.hostname_label], registry=reg)
    boot.labels(hw.name).set(hw.boot_time)
    il = ["device", "port", hw.hostname_label]
    state = Gauge("node_infiniband_state_id", "State of the InfiniBand port", il, registry=reg)
    phys = Gauge(
        "node_infiniband_physical_state_id", "Physical state of the InfiniBand port", il, registry=reg
    )
    rate = Gauge("node_infiniband_rate_bytes_per_second", "Maximum signal transfer rate", il, registry=reg)
    counters = {
        c: Gauge(f"node_infiniband_{c}_total", f"InfiniBand {c}", il, registry=reg) for c in IB_COUNTERS
    }
    for d in range(8):
        dev = f"mlx5_{d}"
        down = dev in hw.ib_down
        state.labels(dev, "1", hw.name).set(1 if down else 4)
        phys.labels(dev, "1", hw.name).set(3 if down else 5)
        rate.labels(dev, "1", hw.name).set(50e9)
        for c, g in counters.items():
            g.labels(dev, "1", hw.name).set(hw.ib_counters.get((dev, c), 0))
    return generate_latest(reg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporters:
    """One HTTP server; /node/<name>/metrics is that node's exporter."""

    def __init__(self, nodes: list[NodeHw]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                with outer.lock:
                    hw = outer.nodes.get(parts[1]) if len(parts) == 3 else None
                    body = render(hw) if hw is not None and hw.exporter_up else None
                if body is None:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def prometheus(exporters: Exporters, scrape_interval: str = "1s") -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus is not installed (scripts/bootstrap.sh installs it)")
    work = Path(tempfile.mkdtemp(prefix="health-prom-"))
    jobs = []
    for name in exporters.nodes:
        jobs.append(
            f"  - job_name: dcgm-{name}\n    metrics_path: /node/{name}/metrics\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{exporters.port}']\n"
        )
    (work / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  scrape_timeout: {scrape_interval}\n"
        "scrape_configs:\n" + "".join(jobs)
    )
    port = free_port()
    log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(work / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready in 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if not os.environ.get("HEALTH_KEEP_TMP"):
            shutil.rmtree(work, ignore_errors=True)


def wait_until(pred, timeout: float = 30.0, interval: float = 0.25):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s; last value {value!r}")
        time.sleep(interval)



def heal_all(sim) -> float:  # type: ignore[no-untyped-def]
    """Heal every node of the sim (a repair: a new boot); the moment to pass to `rescraped`."""
    from opsctl.sim import monitoring

    for node in sim.node_names:
        monitoring.heal(sim, node)
    return float(math.ceil(time.time()))  # the boot time a heal gives is rounded up


def rescraped(sim, since: float | None) -> bool:  # type: ignore[no-untyped-def]
    """Whether the sim's Prometheus has scraped both exporters of every node since ``since`` (None:
    nothing to wait for). Until then a healed node's boot is new while its GPUs' latest samples may
    still be of the boot before, and their recovery action rightly unknown."""
    from opsctl.sim import monitoring

    if since is None:
        return True
    info = monitoring.load_info(sim)
    assert info is not None, "the sim runs no monitoring"
    return monitoring.scraped_since(info.prometheus_url, since)
