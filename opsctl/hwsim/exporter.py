"""One process that serves the metrics endpoints of many simulated nodes, as the real nodes do.

Each node has two endpoints, like a real GPU node: its dcgm-exporter (the fields of the counters
file given with ``--collectors``, as the dcgm role renders it) and its node_exporter (boot time and
the infiniband collector). Each scrape of ``http://HOST:PORT/metrics`` reads that node's state file
and renders that exporter's series (see ``metrics``). A supervisor thread watches the state files:
when an exporter is marked down (the ``exporter_down`` fault) its listening socket is closed, so
Prometheus gets "connection refused" and marks that target down; when it comes back the same port
is opened again. 64 nodes cost 128 idle threads, not 128 processes.

Standard library only, so the lab can run it with Debian's bare python3::

    python3 -m opsctl.hwsim.exporter --collectors counters.csv --state-dir DIR \
        --node gpu-001=9400,9100 --node gpu-002=9401,9101
    python3 -m opsctl.hwsim.exporter --state /var/lib/hwsim/state.json --node gpu-001=9400 \
        --serve dcgm --listen 0.0.0.0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opsctl.errors import OpsctlError
from opsctl.hwsim.collectors import DEFAULT_PATH, Counter
from opsctl.hwsim.dcgm_exporter import NO_FLAGS, ExporterFlags, exporter_version, hostname_label
from opsctl.hwsim.metrics import (
    XID_WINDOW_MS,
    Family,
    dcgm_families,
    load_collectors,
    node_families,
    read_job_mapping,
    render_text,
)
from opsctl.hwsim.state import NodeHardware, load, make_node, save, state_path

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_SECONDS = 0.25
KINDS = ("dcgm", "node")  # dcgm-exporter, node_exporter


@dataclass(frozen=True)
class NodeSpec:
    """A node and the ports of its two exporters (0: any free port)."""

    name: str
    dcgm_port: int = 0
    node_port: int = 0

    def port(self, kind: str) -> int:
        return self.dcgm_port if kind == "dcgm" else self.node_port


@dataclass(frozen=True)
class DcgmConfig:
    """What dcgm-exporter is started with: its counters file, XID count window, and the release and
    flags that decide how it names the node (no release: the node's own name, as 3.x does)."""

    counters: tuple[Counter, ...]
    xid_window_ms: int = XID_WINDOW_MS
    release: str | None = None
    flags: ExporterFlags = NO_FLAGS
    job_mapping_dir: Path | None = None  # --hpc-job-mapping-dir: one subdirectory per node

    def hostname(self, node: str) -> str:
        return node if self.release is None else hostname_label(self.release, self.flags, node)

    def jobs(self, node: str) -> dict[int, list[str]]:
        return {} if self.job_mapping_dir is None else read_job_mapping(self.job_mapping_dir / node)


def render_kind(kind: str, state: NodeHardware, dcgm: DcgmConfig) -> list[Family]:
    if kind == "dcgm":
        return dcgm_families(
            state,
            dcgm.counters,
            xid_window_ms=dcgm.xid_window_ms,
            hostname=dcgm.hostname(state.node),
            jobs=dcgm.jobs(state.node),
        )
    return node_families(state)


def is_up(state: NodeHardware, kind: str) -> bool:
    return state.dcgm_exporter_up if kind == "dcgm" else state.node_exporter_up


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state_file: Path
    kind: str
    dcgm: DcgmConfig

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A scraper that gave up (Prometheus past its scrape timeout on a loaded host) closes the
        # connection mid-answer: routine for an exporter, so no traceback; anything else still prints.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        try:
            fams = render_kind(self.server.kind, load(self.server.state_file), self.server.dcgm)
            body = render_text(fams).encode()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.send_error(500, f"cannot read state: {exc}")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape from 64 nodes every few seconds is noise


class NodeEndpoint:
    """One exporter's metrics port on one node, opened and closed as that exporter goes up and down."""

    def __init__(
        self, node: str, kind: str, state_file: Path, host: str, port: int, dcgm: DcgmConfig
    ) -> None:
        self.node = node
        self.kind = kind
        self.state_file = state_file
        self.host = host
        self.port = port
        self.dcgm = dcgm
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    def open(self) -> None:
        if self._server is not None:
            return
        server = _Server((self.host, self.port), _Handler)
        server.state_file = self.state_file
        server.kind = self.kind
        server.dcgm = self.dcgm
        self.port = server.server_address[1]  # the kernel's pick when asked for port 0
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"metrics-{self.node}-{self.kind}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)


def _wanted_up(state_file: Path, kind: str) -> bool:
    try:
        state = load(state_file)
    except (OSError, ValueError):
        return True  # keep serving (500s) rather than flap on a state file being replaced
    return is_up(state, kind)


def parse_node(arg: str) -> NodeSpec:
    """``NAME``, ``NAME=DCGM_PORT`` or ``NAME=DCGM_PORT,NODE_PORT``."""
    name, _, ports = arg.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"bad --node {arg!r} (want NAME[=DCGM_PORT[,NODE_PORT]])")
    parts = ports.split(",") if ports else []
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"bad --node {arg!r} (want NAME[=DCGM_PORT[,NODE_PORT]])")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in --node {arg!r}") from None
    return NodeSpec(name, *nums)


class MultiExporter:
    def __init__(
        self,
        state_dir: Path,
        nodes: Sequence[NodeSpec],
        host: str = "127.0.0.1",
        *,
        counters: Sequence[Counter],
        state_file: Path | None = None,
        xid_window_ms: int = XID_WINDOW_MS,
        serve: Sequence[str] = KINDS,
        release: str | None = None,
        flags: ExporterFlags = NO_FLAGS,
        job_mapping_dir: Path | None = None,
    ) -> None:
        """Endpoints per node, reading ``state_dir/NODE.json`` (or ``state_file`` for a single node).

        ``counters`` is dcgm-exporter's counters file, ``xid_window_ms`` its
        ``--xid-count-window-size``; ``serve`` the exporters to run (the lab runs the real
        node_exporter and serves only ``dcgm``); ``release`` and ``flags`` the dcgm-exporter release
        to behave as and its node-naming flags (dcgm_exporter.py)."""
        if state_file is not None and len(nodes) != 1:
            raise ValueError("a single state file serves exactly one node")
        unknown = set(serve) - set(KINDS)
        if unknown or not serve:
            raise ValueError(f"serve: want some of {', '.join(KINDS)}, not {', '.join(serve)}")
        dcgm = DcgmConfig(tuple(counters), xid_window_ms, release, flags, job_mapping_dir)
        self.endpoints: list[NodeEndpoint] = []
        for spec in nodes:
            path = state_file or state_path(state_dir, spec.name)
            if not path.exists():
                save(make_node(spec.name), path)
            for kind in KINDS:
                if kind in serve:
                    self.endpoints.append(NodeEndpoint(spec.name, kind, path, host, spec.port(kind), dcgm))
        self._stop = threading.Event()

    def ports(self) -> dict[str, dict[str, int]]:
        """node -> {"dcgm": port, "node": port} of the exporters served."""
        out: dict[str, dict[str, int]] = {}
        for e in self.endpoints:
            out.setdefault(e.node, {})[e.kind] = e.port
        return out

    def start(self) -> None:
        for e in self.endpoints:
            e.open()
            if not _wanted_up(e.state_file, e.kind):
                e.close()  # it keeps the port it got, to come back on later

    def supervise(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            for e in self.endpoints:
                up = _wanted_up(e.state_file, e.kind)
                if up and not e.serving:
                    with contextlib.suppress(OSError):  # port briefly taken: retry on the next poll
                        e.open()
                elif not up and e.serving:
                    e.close()

    def stop(self) -> None:
        self._stop.set()
        for e in self.endpoints:
            e.close()


def _write_ports(path: Path, ports: dict[str, dict[str, int]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(ports, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="hwsim-exporter", description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-dir", type=Path, help="directory of NODE.json state files")
    where.add_argument("--state", type=Path, help="the state file of the one --node (lab machines)")
    ap.add_argument(
        "--node",
        action="append",
        type=parse_node,
        required=True,
        help="NAME, NAME=DCGM_PORT or NAME=DCGM_PORT,NODE_PORT (0 or none: any free port); repeat per node",
    )
    ap.add_argument(
        "-f",
        "--collectors",
        type=Path,
        default=Path(DEFAULT_PATH),
        help=f"dcgm-exporter's counters file: the fields to export (default {DEFAULT_PATH})",
    )
    ap.add_argument(
        "--serve",
        default=",".join(KINDS),
        help="exporters to serve: dcgm, node or dcgm,node (default); the lab serves dcgm only",
    )
    ap.add_argument("--listen", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--ports-file", type=Path, help="write {node: port} JSON here once all ports listen")
    ap.add_argument(
        "-x",
        "--xid-count-window-size",
        type=int,
        default=XID_WINDOW_MS,
        help=f"window of DCGM_EXP_XID_ERRORS_COUNT in ms, as dcgm-exporter's flag (default {XID_WINDOW_MS})",
    )
    ap.add_argument(
        "-r",
        "--remote-hostengine-info",
        help="as dcgm-exporter's flag (the host engine is simulated): with --release 4.x, the host "
        "part becomes every series' Hostname, as the real exporter does",
    )
    ap.add_argument("-k", "--kubernetes", action="store_true", help="as dcgm-exporter's flag")
    ap.add_argument(
        "-p",
        "--hpc-job-mapping-dir",
        type=Path,
        help="as dcgm-exporter's flag, one subdirectory per simulated node (DIR/NODE/<gpu index>)",
    )
    ap.add_argument(
        "--release",
        help="the dcgm-exporter release to name the node as (e.g. 4.4.1-4.6.0); default: the node's name",
    )
    args = ap.parse_args(argv)
    if args.release is not None:
        try:
            exporter_version(args.release)
        except ValueError as exc:
            ap.error(str(exc))
    if args.xid_count_window_size <= 0:
        ap.error("--xid-count-window-size must be > 0")
    if args.state is not None and len(args.node) != 1:
        ap.error("--state serves exactly one --node")
    serve = [k.strip() for k in args.serve.split(",") if k.strip()]
    if not serve or set(serve) - set(KINDS):
        ap.error(f"--serve: want dcgm, node or dcgm,node, not {args.serve!r}")
    state_dir = args.state_dir or args.state.parent
    try:
        counters = load_collectors(args.collectors) if "dcgm" in serve else []
    except OpsctlError as exc:
        print(f"hwsim-exporter: error: {exc}", file=sys.stderr)
        return 2
    exporter = MultiExporter(
        state_dir,
        args.node,
        args.listen,
        counters=counters,
        state_file=args.state,
        xid_window_ms=args.xid_count_window_size,
        serve=serve,
        release=args.release,
        flags=ExporterFlags(args.remote_hostengine_info, args.kubernetes),
        job_mapping_dir=args.hpc_job_mapping_dir,
    )
    try:
        exporter.start()
    except OSError as exc:
        exporter.stop()
        print(f"hwsim-exporter: error: cannot listen: {exc}", file=sys.stderr)
        return 3
    if args.ports_file:
        _write_ports(args.ports_file, exporter.ports())
    signal.signal(signal.SIGTERM, lambda *_: exporter._stop.set())
    try:
        exporter.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        exporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
