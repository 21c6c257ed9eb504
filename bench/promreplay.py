"""Replay recorded Prometheus answers on loopback, so the cost of `opsctl health` itself (the
client: interpreter start-up, queries, JSON, evidence, judging, rendering) can be measured without
the Prometheus server and 1024 emulated exporters sharing the same 2 cores.

A recording (``bench_health.py query --record FILE``) holds, per query of
``PrometheusSource.queries()``, the raw HTTP body Prometheus answered and when. Served later, the
sample values that are times (the freshness timestamps, the XIDs' last-counted times) move forward
by the time since the recording, so the evidence is as fresh as it was then.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# the queries whose sample values are Unix times, not measurements
TIME_VALUED = ("fresh", "xid_last")


def shift_times(body: dict[str, Any], delta: float) -> dict[str, Any]:
    """A copy of a Prometheus instant-query answer with every sample value (and its evaluation
    time) moved forward by ``delta`` seconds."""
    out = json.loads(json.dumps(body))
    for s in out["data"]["result"]:
        at, value = s["value"]
        s["value"] = [at + delta, repr(float(value) + delta)]
    return out


@dataclass
class Recording:
    recorded_at: float
    nodes: int
    queries: dict[str, str]  # key -> PromQL
    bodies: dict[str, dict[str, Any]]  # key -> the parsed answer
    seconds: dict[str, float]  # key -> how long Prometheus took to answer it
    _encoded: dict[str, bytes] = field(default_factory=dict, repr=False)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"recorded_at": self.recorded_at, "nodes": self.nodes,
                                    "queries": self.queries, "bodies": self.bodies,
                                    "seconds": self.seconds}))

    @classmethod
    def load(cls, path: Path) -> Recording:
        d = json.loads(path.read_text())
        return cls(d["recorded_at"], d["nodes"], d["queries"], d["bodies"], d["seconds"])

    def answer(self, query: str, now: float) -> bytes | None:
        """The body to serve for ``query`` at ``now``; None for a query not recorded."""
        for key, q in self.queries.items():
            if q == query:
                if key in TIME_VALUED:
                    return json.dumps(shift_times(self.bodies[key], now - self.recorded_at)).encode()
                if key not in self._encoded:  # the rest never change: encode once
                    self._encoded[key] = json.dumps(self.bodies[key]).encode()
                return self._encoded[key]
        return None


def record(url: str, queries: dict[str, str], nodes: int) -> Recording:
    import urllib.request

    bodies, seconds = {}, {}
    now = time.time()
    for key, q in queries.items():
        data = urllib.parse.urlencode({"query": q, "time": f"{now:.3f}"}).encode()
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=60) as resp:
            bodies[key] = json.loads(resp.read())
        seconds[key] = time.perf_counter() - t0
    return Recording(now, nodes, queries, bodies, seconds)


class ReplayServer:
    """A Prometheus stand-in on 127.0.0.1 answering /api/v1/query from a recording."""

    def __init__(self, rec: Recording) -> None:
        recording = rec

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, params: dict[str, list[str]]) -> None:
                body = recording.answer(params.get("query", [""])[0], time.time())
                if body is None:
                    self.send_error(400, "query not recorded")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self._serve(urllib.parse.parse_qs(self.rfile.read(length).decode()))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
