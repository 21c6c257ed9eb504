"""Monitoring for the simulated cluster: emulated GPU/IB exporters and a real Prometheus, configured
by the production roles.

The ``monitoring`` add-on of ``SimCluster`` (``SimCluster(addons=["monitoring"])``):

- writes a healthy simulated-hardware state file per node (``STATE_DIR/hwsim/NODE.json``),
- renders, with ``ansible-playbook`` and the production roles (``render_monitoring.yml``), the
  dcgm role's counters file for the pinned DCGM (inventory/production versions.yml) and the
  prometheus role's prometheus.yml for an inventory of the sim's nodes, each at 127.0.0.1 with its
  own dcgm-exporter and node_exporter ports; the repository's alert rules are loaded as the role
  installs them. Series carry what production's carry: dcgm-exporter's ``Hostname``, and
  ``instance`` = the node name on every target; no sim-only labels,
- starts ONE exporter process serving every node's dcgm-exporter (only the counters file's fields)
  and node_exporter endpoints, two ports per node (``opsctl.hwsim.exporter``),
- starts Debian's ``prometheus`` with that config and its own data directory on a free port, and
  waits until every exporter target is up,
- writes ``[prometheus] url`` and ``[remediator] metrics_address`` (a port the rendered config
  scrapes as the remediation service) into the sim's opsctl.toml.

``inject(sim, node, fault)`` and ``heal(sim, node)`` change a node's state file (the exporter serves
it on the next scrape); ``slurmd_stopped`` also stops that node's real slurmd, and healing starts it;
``reboot`` restarts it.

``MonitoringAddon(alertmanager=True)`` also runs Debian's Alertmanager with the alertmanager role's
rendered config, and the rendered prometheus.yml sends alerts to it.
``MonitoringAddon(xid_window_ms=..., dcgm_version=..., counters_file=...)`` sets the emulated
dcgm-exporter's XID count window (its ``--xid-count-window-size``), renders the counters file for
another DCGM release than the pinned one (4.5 adds the recovery action; the exporter is then a
release for that DCGM, or ``dcgm_exporter_version``, and names its nodes as that release does with
the role's flags), or replaces the rendered file with another (a site's variant); register such an
instance under its own name (``register_addon``) to start a sim with it. A training run's metrics
endpoints are scraped once a file_sd target file is written in
``MonitoringInfo.file_sd_dir/training/`` (``add_training_targets``).
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from opsctl.errors import ConfigError, UsageError
from opsctl.hwsim.dcgm_exporter import ExporterFlags, parse_flags, release_for
from opsctl.hwsim.faults import apply_fault, parse_spec
from opsctl.hwsim.faults import heal as heal_state
from opsctl.hwsim.metrics import XID_WINDOW_MS, load_collectors
from opsctl.hwsim.state import (
    DEFAULT_HCA_LAYOUT,
    NodeHardware,
    fabric_hcas,
    load,
    make_node,
    save,
    state_path,
)

if TYPE_CHECKING:
    from opsctl.sim.cluster import SimCluster

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).resolve().parent / "render_monitoring.yml"
VERSIONS = REPO / "inventory" / "production" / "group_vars" / "all" / "versions.yml"
RULES_GLOB = "dashboards/alerts/*.rules.yml"
SCRAPE_INTERVAL_S = 5
EXPORTER_JOBS = {"dcgm": "dcgm-exporter", "node": "node"}  # exporter kind -> production job name
REMEDIATION_JOB = "opsctl-remediation"
MONITOR_HOST = "sim-monitoring"
EXPORTER_PROC = "hwsim-exporter"
PROMETHEUS_PROC = "prometheus"
ALERTMANAGER_PROC = "alertmanager"
RENDER_TIMEOUT_S = 300


@dataclass
class MonitoringInfo:
    """What ``start`` decided, saved as ``monitoring/monitoring.json`` for later processes."""

    prometheus_url: str
    prometheus_port: int
    exporter_ports: dict[str, dict[str, int]]  # node -> {"dcgm": port, "node": port}
    hw_dir: str
    counters_file: str = ""  # the dcgm-exporter counters file the exporter serves
    file_sd_dir: str = ""  # file_sd target files, one directory per job (training)
    remediator_port: int = 0  # where the rendered config scrapes the remediation service
    alertmanager_url: str = ""  # the sim's Alertmanager, when it runs one


def hw_dir(sim: SimCluster) -> Path:
    return sim.state_dir / "hwsim"


def _mon_dir(sim: SimCluster) -> Path:
    return sim.state_dir / "monitoring"


def load_info(sim: SimCluster) -> MonitoringInfo | None:
    try:
        return MonitoringInfo(**json.loads((_mon_dir(sim) / "monitoring.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def sim_inventory(
    exporter_ports: dict[str, dict[str, int]],
    mon: Path,
    *,
    prometheus_port: int,
    remediator_port: int,
    alertmanager_port: int | None = None,
    ib_fabric_hcas: list[str] | None = None,
) -> dict[str, Any]:
    """The inventory the roles render for: the sim's nodes as GPU nodes at 127.0.0.1, each with its
    own exporter ports (the host variables the prometheus role reads), one monitoring host, and an
    Alertmanager host when ``alertmanager_port`` is given; ``ib_fabric_hcas`` the nodes' fabric."""
    gpu_hosts = {
        node: {"ansible_host": "127.0.0.1", "dcgm_exporter_port": p["dcgm"], "node_exporter_port": p["node"]}
        for node, p in sorted(exporter_ports.items())
    }
    return {
        "all": {
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "cluster_name": "sim",
                "ib_fabric_hcas": list(ib_fabric_hcas or fabric_hcas(DEFAULT_HCA_LAYOUT)),
                # the dcgm role
                "dcgm_exporter_collectors": str(mon / "dcgm-counters.csv"),
                "dcgm_exporter_unit_file": str(mon / "dcgm-exporter.service"),
                # the prometheus role: the sim scrapes every 5 s, and only its nodes run exporters
                "prometheus_port": prometheus_port,
                "prometheus_scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                "prometheus_node_group": "gpu_nodes",
                "prometheus_config_file": str(mon / "prometheus.yml"),
                "prometheus_rules_dir": str(mon / "rules"),
                "prometheus_file_sd_dir": str(mon / "file_sd"),
                # the alertmanager role
                "alertmanager_config_file": str(mon / "alertmanager.yml"),
            },
            "children": {
                "gpu_nodes": {"hosts": gpu_hosts},
                "monitoring": {"hosts": {MONITOR_HOST: {"ansible_host": "127.0.0.1"}}},
                "remediation": {
                    "hosts": {
                        MONITOR_HOST: {
                            "ansible_host": "127.0.0.1",
                            "opsctl_remediation_metrics_port": remediator_port,
                        }
                    }
                },
                "alertmanager": {
                    "hosts": {}
                    if alertmanager_port is None
                    else {MONITOR_HOST: {"ansible_host": "127.0.0.1", "alertmanager_port": alertmanager_port}}
                },
            },
        }
    }


def exporter_release(dcgm_version: str | None = None, dcgm_exporter_version: str | None = None) -> str:
    """The dcgm-exporter release the sim's nodes run: the one given, else the pinned one, or, with
    another DCGM than the pinned one, a release built for that DCGM's major."""
    if dcgm_exporter_version is not None:
        return dcgm_exporter_version
    if dcgm_version is not None:
        return release_for(dcgm_version)
    return str(yaml.safe_load(VERSIONS.read_text())["dcgm_exporter_version"])


def exporter_flags(unit: Path) -> ExporterFlags:
    """The node-naming flags of the dcgm-exporter unit the dcgm role rendered."""
    for line in unit.read_text().splitlines():
        if line.startswith("ExecStart="):
            return parse_flags(line.removeprefix("ExecStart="))
    raise ConfigError(f"{unit}: no ExecStart line")


def render_configs(
    mon: Path, inventory: dict[str, Any], dcgm_version: str | None = None, exporter: str | None = None
) -> None:
    """Run the production roles' render tasks (``render_monitoring.yml``) for ``inventory``, with the
    pinned versions (``dcgm_version`` replaces the pinned DCGM: a site on another release;
    ``exporter`` the dcgm-exporter release)."""
    from opsctl.sim.cluster import SimError

    ansible = Path(sys.executable).parent / "ansible-playbook"
    if not ansible.exists():
        found = shutil.which("ansible-playbook")
        if found is None:
            raise ConfigError("missing program: ansible-playbook (pip install -e .)")
        ansible = Path(found)
    inv = mon / "inventory.yml"
    inv.write_text(json.dumps(inventory, indent=1) + "\n")  # YAML is a JSON superset
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_HOME=str(mon / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(mon / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    argv = [str(ansible), "-i", str(inv), str(PLAYBOOK), "-e", f"@{VERSIONS}"]
    if dcgm_version is not None:
        argv += ["-e", json.dumps({"dcgm_version": dcgm_version})]
    if exporter is not None:
        argv += ["-e", json.dumps({"dcgm_exporter_version": exporter})]
    try:
        done = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=RENDER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SimError(f"rendering the monitoring configuration took over {RENDER_TIMEOUT_S}s") from None
    (mon / "render.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SimError(f"rendering the monitoring configuration failed; see {mon / 'render.log'}")


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def targets_health(url: str) -> dict[tuple[str, str], str]:
    """(job, instance) -> "up" / "down" / "unknown" from Prometheus's own view of its targets."""
    data = _get_json(f"{url}/api/v1/targets?state=active")
    return {
        (t["labels"].get("job", ""), t["labels"].get("instance", t["scrapeUrl"])): t["health"]
        for t in data["data"]["activeTargets"]
    }


NODE_JOBS = ("dcgm-exporter", "node")  # the prometheus role's jobs for the nodes' two exporters


def scraped_since(url: str, since: float, jobs: tuple[str, ...] = NODE_JOBS) -> bool:
    """Whether Prometheus has scraped every target of ``jobs``, successfully, after ``since`` (epoch
    seconds): a change to the simulated hardware made before ``since`` is then in every answer."""
    data = _get_json(f"{url}/api/v1/targets?state=active")
    targets = [t for t in data["data"]["activeTargets"] if t["labels"].get("job") in jobs]
    return bool(targets) and all(t["health"] == "up" and _rfc3339(t["lastScrape"]) > since for t in targets)


def _rfc3339(text: str) -> float:
    """Prometheus's lastScrape (nanoseconds, a zone) as epoch seconds."""
    head, _, frac = text.partition(".")
    digits = "".join(itertools.takewhile(str.isdigit, frac))
    zone = frac[len(digits):] if frac else head[19:]
    stamp = datetime.datetime.fromisoformat(head[:19] + (zone.replace("Z", "+00:00") or "+00:00"))
    return stamp.timestamp() + (float(f"0.{digits}") if digits else 0.0)


def add_training_targets(sim: SimCluster, run: str, urls: dict[str, str]) -> Path:
    """Point Prometheus at a training run's metrics endpoints (component -> URL of /metrics), in a
    file_sd target file as the prometheus role expects one; returns the file. The target label is
    ``run``; the series carry their own ``component``."""
    info = load_info(sim)
    if info is None or not info.file_sd_dir:
        raise UsageError("the sim has no monitoring add-on running")
    targets = sorted(url.split("://", 1)[-1].split("/", 1)[0] for url in urls.values())
    groups = [{"targets": targets, "labels": {"run": run}}]
    path = Path(info.file_sd_dir) / "training" / f"{run}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(groups, indent=1) + "\n")
    os.replace(tmp, path)  # Prometheus never reads half a file
    return path


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

    def __init__(
        self,
        ready_timeout: float | None = None,
        xid_window_ms: int = XID_WINDOW_MS,
        counters_file: str | os.PathLike[str] | None = None,
        dcgm_version: str | None = None,
        alertmanager: bool = False,
        dcgm_exporter_version: str | None = None,
        hca_layout: str = DEFAULT_HCA_LAYOUT,
    ) -> None:
        """``hca_layout``: the RDMA devices of every node (opsctl.hwsim.state.HCA_LAYOUTS); its
        InfiniBand HCAs are the sim's fabric (inventory ib_fabric_hcas, [health] ib_devices)."""
        self.fabric = fabric_hcas(hca_layout)  # an unknown layout is refused here, not at start
        self.hca_layout = hca_layout
        self.ready_timeout = ready_timeout
        self.xid_window_ms = xid_window_ms
        self.counters_file = None if counters_file is None else Path(counters_file)
        self.dcgm_version = dcgm_version
        self.exporter_release = exporter_release(dcgm_version, dcgm_exporter_version)
        self.alertmanager = alertmanager

    def start(self, sim: SimCluster) -> None:
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise ConfigError("missing program: prometheus (run scripts/bootstrap.sh)")
        alertmanager = shutil.which("prometheus-alertmanager") if self.alertmanager else None
        if self.alertmanager and alertmanager is None:
            raise ConfigError("missing program: prometheus-alertmanager (run scripts/bootstrap.sh)")
        from opsctl.sim.cluster import SimError, free_ports

        nodes = sim.node_names
        hw = hw_dir(sim)
        mon = _mon_dir(sim)
        hw.mkdir(parents=True, exist_ok=True)
        mon.mkdir(parents=True, exist_ok=True)
        for stale in hw.glob("*.json"):
            stale.unlink()
        for node in nodes:  # every up() starts from healthy hardware
            save(make_node(node, hca_layout=self.hca_layout), state_path(hw, node))
        ports = free_ports(2 * len(nodes) + 3)
        port, remediator_port, am_port = ports[-3:]
        exporter_ports = {
            node: {"dcgm": ports[2 * i], "node": ports[2 * i + 1]} for i, node in enumerate(nodes)
        }
        shutil.rmtree(mon / "rules", ignore_errors=True)
        (mon / "rules").mkdir()
        for rules in sorted(REPO.glob(RULES_GLOB)):  # what the role installs in prometheus_rules_dir
            shutil.copy2(rules, mon / "rules" / rules.name)
        (mon / "file_sd" / "training").mkdir(parents=True, exist_ok=True)
        render_configs(
            mon,
            sim_inventory(
                exporter_ports,
                mon,
                prometheus_port=port,
                remediator_port=remediator_port,
                alertmanager_port=am_port if alertmanager else None,
                ib_fabric_hcas=self.fabric,
            ),
            self.dcgm_version,
            self.exporter_release,
        )
        am_url = ""
        if alertmanager is not None:  # the role's alertmanager.yml: its routes, its receivers
            am_url = f"http://127.0.0.1:{am_port}"
            shutil.rmtree(mon / "alertmanager-data", ignore_errors=True)
            sim.spawn(ALERTMANAGER_PROC, [
                alertmanager,
                f"--config.file={mon / 'alertmanager.yml'}",
                f"--storage.path={mon / 'alertmanager-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ])  # fmt: skip
        counters = mon / "dcgm-counters.csv"
        if self.counters_file is not None:
            shutil.copyfile(self.counters_file, counters)
        load_collectors(counters)  # a file the exporter would refuse is an error here, not in its log

        ports_file = mon / "exporter-ports.json"
        ports_file.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "opsctl.hwsim.exporter",
            "--state-dir",
            str(hw),
            "--collectors",
            str(counters),
            "--ports-file",
            str(ports_file),
            "--xid-count-window-size",
            str(self.xid_window_ms),
            # named as the role's unit makes this release name its node
            "--release",
            self.exporter_release,
        ]
        flags = exporter_flags(mon / "dcgm-exporter.service")
        if flags.remote_hostengine is not None:
            argv += ["--remote-hostengine-info", flags.remote_hostengine]
        if flags.kubernetes:
            argv.append("--kubernetes")
        for node, p in exporter_ports.items():
            argv += ["--node", f"{node}={p['dcgm']},{p['node']}"]
        sim.spawn(EXPORTER_PROC, argv)
        deadline = time.monotonic() + 60
        while not ports_file.exists():
            if not sim.procs.alive(EXPORTER_PROC):
                raise SimError(f"the hardware exporter exited: {sim.log_tail(EXPORTER_PROC)}")
            if time.monotonic() > deadline:
                raise SimError("the hardware exporter did not listen within 60s")
            time.sleep(0.1)

        url = f"http://127.0.0.1:{port}"
        config = mon / "prometheus.yml"
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
        info = MonitoringInfo(
            url, port, exporter_ports, str(hw), str(counters), str(mon / "file_sd"), remediator_port, am_url
        )
        (mon / "monitoring.json").write_text(json.dumps(asdict(info), indent=1) + "\n")
        timeout = self.ready_timeout if self.ready_timeout is not None else 60.0 + 0.5 * len(nodes)
        self.wait_targets_up(sim, url, nodes, timeout)
        set_prometheus_url(sim.config_path, url)
        sim.set_config("remediator", metrics_address=f"127.0.0.1:{remediator_port}")
        sim.set_config("health", ib_devices=self.fabric)  # as the opsctl_remediation role renders it

    @staticmethod
    def wait_targets_up(sim: SimCluster, url: str, nodes: list[str], timeout: float) -> None:
        """Until every node's dcgm-exporter and node_exporter target is up."""
        from opsctl.sim.cluster import SimError

        wanted = {(job, node) for node in nodes for job in EXPORTER_JOBS.values()}
        deadline = time.monotonic() + timeout
        health: dict[tuple[str, str], str] = {}
        while time.monotonic() < deadline:
            if not sim.procs.alive(PROMETHEUS_PROC):
                raise SimError(f"prometheus exited: {sim.log_tail(PROMETHEUS_PROC)}")
            try:
                health = targets_health(url)
            except (OSError, ValueError, KeyError):
                health = {}
            if all(health.get(t) == "up" for t in wanted):
                return
            time.sleep(0.5)
        down = sorted(f"{node} ({job})" for job, node in wanted if health.get((job, node)) != "up")
        raise SimError(
            f"Prometheus targets not up after {timeout:.0f}s: {', '.join(down[:8]) or 'none answered'}"
        )

    def stop(self, sim: SimCluster) -> None:
        sim.stop_process(PROMETHEUS_PROC)
        sim.stop_process(EXPORTER_PROC)
        sim.stop_process(ALERTMANAGER_PROC)

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
            exporters = {k: h for k, h in health.items() if k[0] in EXPORTER_JOBS.values()}
            out["targets_up"] = sum(1 for h in exporters.values() if h == "up")
            out["targets"] = len(exporters)
        except (OSError, ValueError, KeyError) as exc:
            out["targets_error"] = str(exc)
        return out


def _checked_node(sim: SimCluster, node: str) -> None:
    if node not in sim.node_names:
        raise UsageError(f"unknown sim node {node!r}")


def inject(sim: SimCluster, node: str, fault: str, *, dry_run: bool = False,
           restart_slurmd: bool = True) -> NodeHardware:
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
    elif parse_spec(fault).name == "reboot" and restart_slurmd and sim.load_state() is not None:
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
