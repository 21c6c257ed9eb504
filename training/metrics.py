"""Metrics from every component: a Prometheus /metrics endpoint and lines in metrics.jsonl."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from training.fsutil import COMMITTED, step_dirs
from training.rundir import RunDir

LAG_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 16)
# Help text of gauges set through `Metrics.log` (others use their name).
GAUGE_HELP = {
    "padding_fraction": "Pad tokens / all tokens in the step's micro-batches on all ranks, fillers included",
    "micro_batches": "Micro-batches each trainer rank ran in the step (equal on every rank)",
}


class CheckpointCollector:
    """``opsctl_train_last_checkpoint_timestamp_seconds{component}``: when the component's newest
    committed checkpoint was committed (its marker's mtime), read at scrape time from the run
    directory, so the age shows on dashboards without the training loop doing anything."""

    def __init__(self, run: RunDir, component: str) -> None:
        self.run, self.component = run, component

    def collect(self) -> Any:
        fam = GaugeMetricFamily(
            "opsctl_train_last_checkpoint_timestamp_seconds",
            "When the newest committed checkpoint of the component was written (epoch seconds)",
            labels=["component"],
        )
        steps = step_dirs(self.run.ckpt(self.component), COMMITTED)
        # pruned between listing and stat: the next scrape sees the newer one
        with contextlib.suppress(OSError):
            if steps:
                fam.add_metric([self.component], (steps[max(steps)] / COMMITTED).stat().st_mtime)
        yield fam


_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(key: str) -> str:
    """A metrics.jsonl key as a Prometheus metric name: "reward_mean_vf:vf-arithmetic" ->
    "reward_mean_vf_vf_arithmetic". prometheus_client would serve the key itself in the quoted
    UTF-8 form, which Prometheus 2 (Debian 12's) cannot parse: the whole target would fail."""
    return _NOT_IN_NAME.sub("_", key)


class Metrics:
    """Per-process sink. Lines are appended with one write() on an O_APPEND fd, so the processes
    of a run can share one metrics.jsonl without interleaving lines."""

    def __init__(self, run: RunDir, component: str, port: int | None = 0, host: str = "127.0.0.1") -> None:
        self.component = component
        self.registry = CollectorRegistry()
        self._gauges: dict[str, Gauge] = {}
        self._counters: dict[str, Counter] = {}
        self.lag = Histogram(
            "opsctl_train_off_policy_lag_steps",
            "Policy versions between generation and use",
            registry=self.registry,
            buckets=LAG_BUCKETS,
        )
        self.registry.register(CheckpointCollector(run, component))
        # Held-out evaluation by environment (eval_gauges); eval records set no unlabelled gauges.
        self._eval_accuracy = Gauge("opsctl_train_eval_accuracy", "Held-out accuracy of the last evaluation",
                                    ["component", "env"], registry=self.registry)
        self._eval_pass = Gauge("opsctl_train_eval_pass_at_k", "Held-out pass@k of the last evaluation",
                                ["component", "env", "k"], registry=self.registry)
        self._fd = os.open(run.metrics, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.port: int | None = None
        self._server: Any = None
        if port is not None:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
            self.port = int(self._server.server_port)
            shown = host if host not in ("0.0.0.0", "") else socket.gethostname()
            run.announce(
                f"metrics-{component}", {"url": f"http://{shown}:{self.port}/metrics", "pid": os.getpid()}
            )

    def gauge(self, name: str, value: float, doc: str = "") -> None:
        g = self._gauges.get(name)
        if g is None:
            g = self._gauges[name] = Gauge(
                f"opsctl_train_{metric_name(name)}",
                doc or GAUGE_HELP.get(name, name),
                ["component"],
                registry=self.registry,
            )
        g.labels(self.component).set(value)

    def count(self, name: str, inc: float = 1.0, doc: str = "") -> None:
        c = self._counters.get(name)
        if c is None:
            c = self._counters[name] = Counter(
                f"opsctl_train_{metric_name(name)}", doc or name, ["component"], registry=self.registry
            )
        c.labels(self.component).inc(inc)

    def log(self, record: dict[str, Any]) -> None:
        line = {"time": round(time.time(), 3), "component": self.component, **record}
        os.write(self._fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        if record.get("event") == "eval":
            return  # per environment: eval_gauges
        for k, v in record.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                self.gauge(k, float(v))

    def eval_gauges(self, env: str, accuracy: float, pass_at: dict[int, float]) -> None:
        self._eval_accuracy.labels(self.component, env).set(accuracy)
        for k, value in pass_at.items():
            self._eval_pass.labels(self.component, env, str(k)).set(value)

    def close(self) -> None:
        os.close(self._fd)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
