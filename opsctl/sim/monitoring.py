"""Monitoring for the simulated cluster: emulated GPU/IB exporters and a real Prometheus.

The ``monitoring`` add-on of ``SimCluster`` (``SimCluster(addons=["monitoring"])``):

- writes a healthy simulated-hardware state file per node (``STATE_DIR/hwsim/NODE.json``),
- starts ONE exporter process serving every node's dcgm-exporter and node_exporter infiniband
  series, one port per node (``opsctl.hwsim.exporter``),
- starts Debian's ``prometheus`` with its own config and data directory, on a free port, scraping
  every node each 5 s with a ``node`` label, and waits until every target is up,
- writes ``[prometheus] url`` into the sim's opsctl.toml.

``inject(sim, node, fault)`` and ``heal(sim, node)`` change a node's state file (the exporter serves
it on the next scrape); ``slurmd_stopped`` also stops that node's real slurmd, and healing starts it;
``reboot`` restarts it.

``MonitoringAddon(xid_window_ms=...)`` sets the emulated dcgm-exporter's XID count window (its
``--xid-count-window-size``); register such an instance under its own name (``register_addon``) to
start a sim with it.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opsctl.errors import ConfigError, UsageError
from opsctl.hwsim.faults import apply_fault, parse_spec
from opsctl.hwsim.faults import heal as heal_state
from opsctl.hwsim.metrics import XID_WINDOW_MS
from opsctl.hwsim.state import NodeHardware, load, make_node, save, state_path

if TYPE_CHECKING:
    from opsctl.sim.cluster import SimCluster

SCRAPE_INTERVAL_S = 5
JOB = "hwsim"
EXPORTER_PROC = "hwsim-exporter"
PROMETHEUS_PROC = "prometheus"


@dataclass
class MonitoringInfo:
    """What ``start`` decided, saved as ``monitoring/monitoring.json`` for later processes."""

    prometheus_url: str
    prometheus_port: int
    exporter_ports: dict[str, int]
    hw_dir: str


def hw_dir(sim: SimCluster) -> Path:
    return sim.state_dir / "hwsim"


def _mon_dir(sim: SimCluster) -> Path:
    return sim.state_dir / "monitoring"


def load_info(sim: SimCluster) -> MonitoringInfo | None:
    try:
        return MonitoringInfo(**json.loads((_mon_dir(sim) / "monitoring.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def prometheus_config(exporter_ports: dict[str, int], host: str = "127.0.0.1") -> str:
    """prometheus.yml: one target per node, labelled with the node name (YAML is a JSON superset)."""
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL_S - 1}s",
        },
        "scrape_configs": [
            {
                "job_name": JOB,
                "static_configs": [
                    {"targets": [f"{host}:{port}"], "labels": {"node": node}}
                    for node, port in sorted(exporter_ports.items())
                ],
            }
        ],
    }
    return "# Written by opsctl sim (monitoring add-on).\n" + json.dumps(config, indent=1) + "\n"


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def targets_health(url: str) -> dict[str, str]:
    """node label -> "up" / "down" / "unknown" from Prometheus's own view of its targets."""
    data = _get_json(f"{url}/api/v1/targets?state=active")
    return {t["labels"].get("node", t["scrapeUrl"]): t["health"] for t in data["data"]["activeTargets"]}


def set_prometheus_url(config_path: Path, url: str) -> None:
    """Add or replace ``[prometheus] url`` in opsctl.toml, leaving the rest as written."""
    text = config_path.read_text() if config_path.exists() else ""
    try:
        has_section = "prometheus" in tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    line = f'url = "{url}"'
    if not has_section:
        text = text.rstrip("\n") + ("\n\n" if text else "") + f"[prometheus]\n{line}\n"
    else:
        out, in_section, done = [], False, False
        for raw in text.splitlines():
            stripped = raw.strip()
            if stripped.startswith("["):
                if in_section and not done:
                    out.append(line)
                    done = True
                in_section = stripped == "[prometheus]"
            elif in_section and stripped.split("=")[0].strip() == "url":
                raw, done = line, True
            out.append(raw)
        if in_section and not done:
            out.append(line)
        text = "\n".join(out) + "\n"
    config_path.write_text(text)


class MonitoringAddon:
    name = "monitoring"

    def __init__(self, ready_timeout: float | None = None, xid_window_ms: int = XID_WINDOW_MS) -> None:
        self.ready_timeout = ready_timeout
        self.xid_window_ms = xid_window_ms

    def start(self, sim: SimCluster) -> None:
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise ConfigError("missing program: prometheus (run scripts/bootstrap.sh)")
        from opsctl.sim.cluster import SimError, free_ports

        nodes = sim.node_names
        hw = hw_dir(sim)
        mon = _mon_dir(sim)
        hw.mkdir(parents=True, exist_ok=True)
        mon.mkdir(parents=True, exist_ok=True)
        for stale in hw.glob("*.json"):
            stale.unlink()
        for node in nodes:  # every up() starts from healthy hardware
            save(make_node(node), state_path(hw, node))
        ports_file = mon / "exporter-ports.json"
        ports_file.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "opsctl.hwsim.exporter",
            "--state-dir",
            str(hw),
            "--ports-file",
            str(ports_file),
            "--xid-count-window-size",
            str(self.xid_window_ms),
        ]
        for node in nodes:
            argv += ["--node", node]
        sim.spawn(EXPORTER_PROC, argv)
        deadline = time.monotonic() + 60
        while not ports_file.exists():
            if not sim.procs.alive(EXPORTER_PROC):
                raise SimError(f"the hardware exporter exited; see {sim.state_dir / 'log'}")
            if time.monotonic() > deadline:
                raise SimError("the hardware exporter did not listen within 60s")
            time.sleep(0.1)
        exporter_ports = {str(k): int(v) for k, v in json.loads(ports_file.read_text()).items()}

        (port,) = free_ports(1)
        url = f"http://127.0.0.1:{port}"
        config = mon / "prometheus.yml"
        config.write_text(prometheus_config(exporter_ports))
        data = mon / "data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
        sim.spawn(PROMETHEUS_PROC, [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ])  # fmt: skip
        info = MonitoringInfo(url, port, exporter_ports, str(hw))
        (mon / "monitoring.json").write_text(json.dumps(asdict(info), indent=1) + "\n")
        timeout = self.ready_timeout if self.ready_timeout is not None else 60.0 + 0.5 * len(nodes)
        self.wait_targets_up(sim, url, nodes, timeout)
        set_prometheus_url(sim.config_path, url)

    @staticmethod
    def wait_targets_up(sim: SimCluster, url: str, nodes: list[str], timeout: float) -> None:
        from opsctl.sim.cluster import SimError

        deadline = time.monotonic() + timeout
        health: dict[str, str] = {}
        while time.monotonic() < deadline:
            if not sim.procs.alive(PROMETHEUS_PROC):
                raise SimError(f"prometheus exited; see {sim.state_dir / 'log' / 'prometheus.log'}")
            try:
                health = targets_health(url)
            except (OSError, ValueError, KeyError):
                health = {}
            if len(health) == len(nodes) and all(h == "up" for h in health.values()):
                return
            time.sleep(0.5)
        down = sorted(n for n in nodes if health.get(n) != "up")
        raise SimError(
            f"Prometheus targets not up after {timeout:.0f}s: {', '.join(down[:8]) or 'none answered'}"
        )

    def stop(self, sim: SimCluster) -> None:
        sim.stop_process(PROMETHEUS_PROC)
        sim.stop_process(EXPORTER_PROC)

    def status(self, sim: SimCluster) -> dict[str, Any]:
        info = load_info(sim)
        if info is None:
            return {"running": False}
        out: dict[str, Any] = {
            "running": sim.procs.alive(PROMETHEUS_PROC) and sim.procs.alive(EXPORTER_PROC),
            "prometheus_url": info.prometheus_url,
            "exporter_ports": info.exporter_ports,
        }
        try:
            health = targets_health(info.prometheus_url)
            out["targets_up"] = sum(1 for h in health.values() if h == "up")
            out["targets"] = len(health)
        except (OSError, ValueError, KeyError) as exc:
            out["targets_error"] = str(exc)
        return out


def _checked_node(sim: SimCluster, node: str) -> None:
    if node not in sim.node_names:
        raise UsageError(f"unknown sim node {node!r}")


def inject(sim: SimCluster, node: str, fault: str, *, dry_run: bool = False) -> NodeHardware:
    """Apply ``fault`` to ``node``'s simulated hardware; returns the new state (not saved on dry run).

    A bad fault or node raises ``UsageError`` and changes nothing.
    """
    _checked_node(sim, node)
    path = state_path(hw_dir(sim), node)
    state = load(path) if path.exists() else make_node(node)
    apply_fault(state, fault)
    if dry_run:
        return state
    save(state, path)
    running = sim.slurmd_running(node)
    if not state.slurmd_up and running:
        sim.stop_slurmd(node)
    elif parse_spec(fault).name == "reboot" and sim.load_state() is not None:
        if running:  # the node's daemons start again with the new boot
            sim.stop_slurmd(node)
        sim.start_slurmd(node)
    return state


def heal(sim: SimCluster, node: str, *, dry_run: bool = False) -> NodeHardware:
    """Return ``node``'s hardware to healthy and restart its slurmd if a fault had stopped it."""
    _checked_node(sim, node)
    path = state_path(hw_dir(sim), node)
    state = load(path) if path.exists() else make_node(node)
    heal_state(state)
    if dry_run:
        return state
    save(state, path)
    if sim.load_state() is not None and not sim.slurmd_running(node):
        sim.start_slurmd(node)
    return state
