"""One process that serves the metrics endpoints of many simulated nodes, one port per node.

Each scrape of ``http://HOST:PORT/metrics`` reads that node's state file and renders the dcgm-exporter
and node_exporter infiniband series (see ``metrics``). A supervisor thread watches the state files:
when a node's exporters are marked down (the ``exporter_down`` fault) its listening socket is closed,
so Prometheus gets "connection refused" and marks the target down; when they come back the same port
is opened again. 64 nodes cost 64 idle threads, not 64 processes.

Standard library only, so the lab can run it with Debian's bare python3::

    python3 -m opsctl.hwsim.exporter --state-dir DIR --node gpu-001=9400 --node gpu-002=9401
    python3 -m opsctl.hwsim.exporter --state /var/lib/hwsim/state.json --node gpu-001=9400 --listen 0.0.0.0
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opsctl.hwsim.metrics import XID_WINDOW_MS, families, render_text
from opsctl.hwsim.state import load, make_node, save, state_path

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_SECONDS = 0.25


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state_file: Path
    xid_window_ms: int = XID_WINDOW_MS


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        try:
            fams = families(load(self.server.state_file), xid_window_ms=self.server.xid_window_ms)
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
    """The metrics port of one node, opened and closed as its exporters go up and down."""

    def __init__(
        self, node: str, state_file: Path, host: str, port: int, xid_window_ms: int = XID_WINDOW_MS
    ) -> None:
        self.node = node
        self.state_file = state_file
        self.host = host
        self.port = port
        self.xid_window_ms = xid_window_ms
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
        server.xid_window_ms = self.xid_window_ms
        self.port = server.server_address[1]  # the kernel's pick when asked for port 0
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"metrics-{self.node}",
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


def _wanted_up(state_file: Path) -> bool:
    try:
        state = load(state_file)
    except (OSError, ValueError):
        return True  # keep serving (500s) rather than flap on a state file being replaced
    return state.dcgm_exporter_up or state.node_exporter_up


def parse_node(arg: str) -> tuple[str, int]:
    name, _, port = arg.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"bad --node {arg!r} (want NAME or NAME=PORT)")
    try:
        return name, int(port) if port else 0
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in --node {arg!r}") from None


class MultiExporter:
    def __init__(
        self,
        state_dir: Path,
        nodes: Sequence[tuple[str, int]],
        host: str = "127.0.0.1",
        *,
        state_file: Path | None = None,
        xid_window_ms: int = XID_WINDOW_MS,
    ) -> None:
        """One endpoint per node, reading ``state_dir/NODE.json`` (or ``state_file`` for a single node).

        ``xid_window_ms`` is dcgm-exporter's ``--xid-count-window-size``."""
        if state_file is not None and len(nodes) != 1:
            raise ValueError("a single state file serves exactly one node")
        self.endpoints = []
        for n, p in nodes:
            path = state_file or state_path(state_dir, n)
            if not path.exists():
                save(make_node(n), path)
            self.endpoints.append(NodeEndpoint(n, path, host, p, xid_window_ms))
        self._stop = threading.Event()

    def ports(self) -> dict[str, int]:
        return {e.node: e.port for e in self.endpoints}

    def start(self) -> None:
        for e in self.endpoints:
            e.open()
            if not _wanted_up(e.state_file):
                e.close()  # it keeps the port it got, to come back on later

    def supervise(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            for e in self.endpoints:
                up = _wanted_up(e.state_file)
                if up and not e.serving:
                    with contextlib.suppress(OSError):  # port briefly taken: retry on the next poll
                        e.open()
                elif not up and e.serving:
                    e.close()

    def stop(self) -> None:
        self._stop.set()
        for e in self.endpoints:
            e.close()


def _write_ports(path: Path, ports: dict[str, int]) -> None:
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
        help="NAME or NAME=PORT (port 0 or none: any free port); repeat per node",
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
    args = ap.parse_args(argv)
    if args.xid_count_window_size <= 0:
        ap.error("--xid-count-window-size must be > 0")
    if args.state is not None and len(args.node) != 1:
        ap.error("--state serves exactly one --node")
    state_dir = args.state_dir or args.state.parent
    exporter = MultiExporter(
        state_dir, args.node, args.listen, state_file=args.state, xid_window_ms=args.xid_count_window_size
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
