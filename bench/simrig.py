"""The rig the remediation benches share: a simulated cluster (real slurmctld, N real slurmd, emulated
dcgm-exporter/node exporters, a real Prometheus) and `opsctl remediator run` as a subprocess, started
as systemd would start it, with its own state, decision log, status and metrics files.

Used by bench/fault_to_drain.py and bench/rehearsal.py; importable with bench/ on sys.path (both
scripts run from there).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from opsctl.sim.cluster import SimCluster, free_ports

T = TypeVar("T")


def wait(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``pred`` until it returns something true; SystemExit naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not reached within {timeout:.0f}s")
        time.sleep(interval)


def node_state(env: dict[str, str], node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    return out.stdout.strip()


def node_idle(env: dict[str, str], node: str) -> bool:
    return node_state(env, node) == "idle"


def slurm_reasons(env: dict[str, str]) -> dict[str, str]:
    """node -> Slurm reason for every node that has one (drained, draining, down)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-R", "-o", "%N|%E"], env=env, capture_output=True,
                         text=True, timeout=60, check=False).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def resume(env: dict[str, str], nodes: list[str]) -> None:
    """Resume by hand, as an operator would after the repair (the service may have resumed some)."""
    for node in nodes:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env,
                       check=False, capture_output=True, timeout=60)


@dataclass
class Service:
    """One `opsctl remediator run` process and the files it writes (one set per run)."""

    sim: SimCluster
    dir: Path
    nodes: int
    proc: subprocess.Popen[bytes] | None = None
    metrics_url: str = ""
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def status_file(self) -> Path:
        return self.dir / "status.json"

    @property
    def decision_log(self) -> Path:
        return self.dir / "decisions.jsonl"

    @property
    def log_file(self) -> Path:
        return self.dir / "remediator.log"

    def configure(self, interval: float, **health: Any) -> None:
        """This run's [health] and [remediator] settings in the sim's opsctl.toml: fresh state and logs,
        ``health`` overrides (e.g. max_drains) on top of what the file already has."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (port,) = free_ports(1)
        self.sim.set_config("health", state_file=str(self.dir / "state.json"),
                            decision_log=str(self.decision_log), **health)
        self.sim.set_config("remediator", interval=interval, metrics_address=f"127.0.0.1:{port}",
                            pause_file=str(self.dir / "paused.json"), status_file=str(self.status_file))
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"

    def start(self) -> None:
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "opsctl", "--config", str(self.sim.config_path), "remediator", "run"],
            env=self.sim.env, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # as systemd stops it: after the pass in progress
            self.proc.wait(timeout=120)
        if self._log is not None:
            self._log.close()
            self._log = None

    def status(self) -> dict[str, Any] | None:
        """The last pass as the service wrote it (status_file); None before the first."""
        if self.proc is not None and self.proc.poll() is not None:
            raise SystemExit(f"bench: the service exited; see {self.log_file}")
        try:
            st: dict[str, Any] = json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None
        return st

    def healthy_pass(self, since: float = 0.0) -> bool:
        """A pass that started after ``since`` ran and judged every node OK."""
        st = self.status()
        return bool(st and st["ok"] and st["time"] > since and st["counts"].get("OK") == self.nodes)

    def pass_after(self, since: float, fail: int | None = None) -> bool:
        """A pass that started after ``since`` ran (and counted ``fail`` failing nodes, if given)."""
        st = self.status()
        return bool(st and st["ok"] and st["time"] > since
                    and (fail is None or st["counts"].get("FAIL", 0) == fail))

    def pass_durations(self) -> list[float]:
        """Seconds of every pass that ran, from the service's log ("pass N ok in 0.35s")."""
        try:
            text = self.log_file.read_text()
        except OSError:
            return []
        return [float(m) for m in re.findall(r" pass \d+ (?:ok|failed after) (?:in )?([0-9.]+)s", text)]

    def decisions(self) -> list[dict[str, Any]]:
        try:
            lines = self.decision_log.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(x) for x in lines if x.strip()]

    def pass_seconds(self) -> tuple[float, float]:
        """(sum, count) of the service's pass duration histogram."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            text = resp.read().decode()
        got = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name.startswith("opsctl_remediator_pass_duration_seconds_")}
        return got.get("opsctl_remediator_pass_duration_seconds_sum", 0.0), got.get(
            "opsctl_remediator_pass_duration_seconds_count", 0.0)


@dataclass
class Rig:
    """A running simulated cluster with monitoring, in a short temporary directory."""

    sim: SimCluster
    dir: Path
    up_s: float

    @classmethod
    def up(cls, nodes: int, addon: str = "monitoring", prefix: str = "rig") -> Rig:
        if shutil.which("slurmctld") is None or shutil.which("prometheus") is None:
            raise SystemExit("bench: needs Slurm and Prometheus (scripts/bootstrap.sh installs them)")
        state_dir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: munge's socket lives inside
        sim = SimCluster(nodes=nodes, state_dir=state_dir, addons=[addon])
        t0 = time.monotonic()
        try:
            sim.up()
        except BaseException:
            print(f"bench: kept {state_dir}", file=sys.stderr)
            raise
        return cls(sim, state_dir, time.monotonic() - t0)

    @property
    def env(self) -> dict[str, str]:
        return self.sim.env

    def service(self, name: str) -> Service:
        return Service(self.sim, self.dir / name, self.sim.num_nodes)

    def down(self, keep: bool) -> None:
        self.sim.down()
        if keep:  # the service's log and decisions explain a failed run
            print(f"bench: kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
