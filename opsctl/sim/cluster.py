"""A simulated Slurm cluster on this host, with real daemons.

One munged (own key and socket), one slurmctld and N slurmd (Slurm's multiple-slurmd emulation:
`slurmd -N NAME`, one port each), every node declared as an 8-GPU H200 node whose GPU device files
are placeholder files in the state directory. Everything lives under one state directory, on free
ports, so several simulated clusters can run side by side. Only the GPUs are simulated.

    with SimCluster(nodes=4, state_dir=tmp) as sim:
        subprocess.run(["sinfo"], env=sim.env)
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tenacity import RetryError, retry, retry_if_result, stop_after_delay, wait_fixed

from opsctl.errors import ConfigError, OpsctlError, UsageError
from opsctl.sim import reboot
from opsctl.sim.addons import SimAddon, load_addon
from opsctl.sim.procs import ProcessRegistry, ProcStatus, sweep_strays

GPUS_PER_NODE = 8
GPU_TYPE = "h200"
DEFAULT_PREFIX = "gpu-"
PARTITION = "gpu"
MAX_NODES = 512
_UNIX_PATH_MAX = 107
_CONF_MARKER = "# Written by opsctl sim: a simulated cluster (multiple-slurmd emulation on one host)."


class SimError(OpsctlError):
    """The simulated cluster failed to start or stop (exit 3)."""


def default_state_dir() -> Path:
    return Path(os.environ.get("OPSCTL_SIM_DIR") or Path.cwd() / ".sim")


# Daemons of the sim listen on ports chosen below the kernel's ephemeral range: a port the kernel
# handed out (bind to port 0) is free only until any process's next outgoing connection takes it as
# its local port, which under a busy parallel test run happened between the choice and the daemon's
# bind (a sim's exporter then exited with "Address already in use").
LOWEST_PORT = 10000


def ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports below the ephemeral range, chosen at random and held open
    together while choosing (so no duplicates, and none in use now)."""
    top = ephemeral_low()
    rng = random.SystemRandom()
    sockets: list[socket.socket] = []
    try:
        for _ in range(200 * count):
            if len(sockets) == count:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("0.0.0.0", rng.randrange(LOWEST_PORT, top)))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        if len(sockets) < count:
            raise SimError(f"found only {len(sockets)} of {count} free ports in {LOWEST_PORT}-{top - 1}")
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class SimState:
    """What `up()` decided, saved as sim.json so later processes can address the cluster."""

    nodes: list[str]
    hostname: str
    ctld_port: int
    node_ports: dict[str, int]
    addons: list[str] = field(default_factory=list)
    slurmd_timeout: int = 20


@dataclass
class SimStatus:
    state_dir: str
    config_path: str
    running: bool
    nodes: list[str]
    processes: list[ProcStatus]
    addons: dict[str, dict[str, Any]]

    @property
    def rss_kib(self) -> int:
        return sum(p.rss_kib for p in self.processes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rss_kib"] = self.rss_kib
        return data


class SimCluster:
    def __init__(
        self,
        nodes: int = 4,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        addons: Sequence[str] = (),
        cpus_per_node: int = 4,
        memory_mb: int = 4096,
        slurmd_timeout: int = 20,
        ready_timeout: float | None = None,
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_NODES} (got {nodes})")
        self.num_nodes = nodes
        self.state_dir = Path(state_dir or default_state_dir()).absolute()
        self.prefix = prefix
        self.addon_names = list(addons)
        self.cpus_per_node = cpus_per_node
        self.memory_mb = memory_mb
        self.slurmd_timeout = slurmd_timeout
        # 64 slurmd registering on 2 busy cores take a while: scale the bound with the node count.
        self.ready_timeout = ready_timeout if ready_timeout is not None else 90.0 + 3.0 * nodes
        self.procs = ProcessRegistry(self.state_dir / "run", self.state_dir / "log")
        self._addons: dict[str, SimAddon] = {}

    # -- paths and environment ------------------------------------------------------------
    @property
    def slurm_conf(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def config_path(self) -> Path:
        return self.state_dir / "opsctl.toml"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "audit.jsonl"

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge" / "munge.socket"

    @property
    def env_vars(self) -> dict[str, str]:
        """The variables that point Slurm commands and opsctl at this cluster."""
        return {"SLURM_CONF": str(self.slurm_conf), "OPSCTL_CONFIG": str(self.config_path)}

    @property
    def env(self) -> dict[str, str]:
        """A full environment for subprocesses: this process's plus `env_vars`."""
        return {**os.environ, **self.env_vars}

    @property
    def node_names(self) -> list[str]:
        state = self.load_state()
        if state is not None:
            return list(state.nodes)
        return self.node_names_fresh()

    def load_state(self) -> SimState | None:
        try:
            return SimState(**json.loads((self.state_dir / "sim.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    # -- managed processes (also for add-ons) ----------------------------------------------
    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike[str] | None = None) -> int:
        """Start a daemon that `down()` will stop; returns its pid. `env` defaults to `self.env`."""
        return self.procs.spawn(name, argv, env=env if env is not None else self.env, cwd=cwd).pid

    def stop_process(self, name: str, timeout: float = 10.0) -> None:
        self.procs.stop(name, timeout)

    # -- lifecycle -------------------------------------------------------------------------
    def running(self) -> bool:
        state = self.load_state()
        if state is None:
            return False
        required = ["munged", "slurmctld", *(f"slurmd-{n}" for n in state.nodes)]
        return all(self.procs.alive(name) for name in required)

    def up(self) -> SimCluster:
        """Start the cluster and wait until every node is idle; idempotent when already up."""
        state = self.load_state()
        if state is not None and self.running():
            if len(state.nodes) != self.num_nodes:
                raise UsageError(
                    f"a simulated cluster with {len(state.nodes)} nodes is already running in "
                    f"{self.state_dir}; run `opsctl sim down` first"
                )
            return self
        self.down()  # leftovers of a crashed run
        for attempt in range(3):
            try:
                self._start()
                return self
            except SimError as exc:
                self.down()
                # Another cluster on this host may grab a port between our choice and the bind.
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
            except BaseException:
                self.down()
                raise
        return self

    def _start(self) -> None:
        self._check_tools()
        for name in self.addon_names:  # an unknown add-on fails before any daemon starts
            self._addons[name] = load_addon(name)
        self._prepare_dirs()
        nodes = self.node_names_fresh()
        ports = free_ports(len(nodes) + 1)
        state = SimState(
            nodes=nodes,
            hostname=socket.gethostname(),
            ctld_port=ports[0],
            node_ports=dict(zip(nodes, ports[1:], strict=True)),
            addons=self.addon_names,
            slurmd_timeout=self.slurmd_timeout,
        )
        self._write_files(state)
        (self.state_dir / "sim.json").write_text(json.dumps(asdict(state), indent=1))
        self._start_munge()
        self.spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.slurm_conf)])
        self._wait_ctld()
        for node in nodes:
            self.start_slurmd(node)
        self.wait_nodes_idle(nodes, self.ready_timeout)
        for name in self.addon_names:
            self._addons[name].start(self)

    def node_names_fresh(self) -> list[str]:
        width = max(3, len(str(self.num_nodes)))
        return [f"{self.prefix}{i:0{width}d}" for i in range(1, self.num_nodes + 1)]

    def down(self) -> None:
        """Stop add-ons, jobs, slurmd, slurmctld and munged; remove nothing but runtime files."""
        state = self.load_state()
        if state is not None:
            for name in reversed(state.addons):
                try:
                    addon = self._addons.get(name) or load_addon(name)
                    addon.stop(self)
                except Exception:  # an add-on failing to stop must not keep Slurm running
                    pass
            if self.procs.alive("slurmctld"):
                self._cancel_jobs()
        names = self.procs.names()
        addon_procs = [n for n in names if n not in {"munged", "slurmctld"} and not n.startswith("slurmd-")]
        self.procs.stop_many(addon_procs)
        self.procs.stop_many([n for n in names if n.startswith("slurmd-")])
        self.procs.stop_many([n for n in names if n == "slurmctld"])
        if self._is_sim_dir():  # never sweep a directory that is not ours (`--state-dir /` typo)
            sweep_strays(self.state_dir)
        self.procs.stop_many([n for n in names if n == "munged"])
        self._addons.clear()
        (self.state_dir / "sim.json").unlink(missing_ok=True)

    def _is_sim_dir(self) -> bool:
        try:
            head = self.slurm_conf.read_text()[:200]
        except OSError:
            return False
        return head.startswith(_CONF_MARKER) and self.state_dir != Path(self.state_dir.anchor)

    def __enter__(self) -> SimCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def status(self) -> SimStatus:
        state = self.load_state()
        addons: dict[str, dict[str, Any]] = {}
        for name in state.addons if state else []:
            try:
                addon = self._addons.get(name) or load_addon(name)
                addons[name] = addon.status(self)
            except Exception as exc:  # a broken add-on shows up in status, it does not hide the rest
                addons[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return SimStatus(
            state_dir=str(self.state_dir),
            config_path=str(self.config_path),
            running=self.running(),
            nodes=list(state.nodes) if state else [],
            processes=self.procs.status(),
            addons=addons,
        )

    def reset(self, timeout: float | None = None) -> None:
        """Back to a clean slate between tests: cancel jobs, restart stopped slurmd, resume every
        node, wait until all are idle."""
        state = self.load_state()
        if state is None:
            raise SimError(f"no simulated cluster in {self.state_dir}")
        self._cancel_jobs()
        for node in state.nodes:
            if not self.slurmd_running(node):
                self.start_slurmd(node)
        states = self.sinfo_states()
        busy = [n for n, s in states.items() if s != "idle"]
        if busy:
            from opsctl.nodeset import fold

            subprocess.run(["scontrol", "update", f"NodeName={fold(busy)}", "State=RESUME"],
                           capture_output=True, env=self.env, timeout=60, check=False)
        self.wait_nodes_idle(state.nodes, timeout or self.ready_timeout)

    # -- fault injection -------------------------------------------------------------------
    def stop_slurmd(self, node: str) -> None:
        """Stop one node's slurmd (slurmctld marks it NOT_RESPONDING, then DOWN, after SlurmdTimeout)."""
        self._check_node(node)
        self.procs.stop(f"slurmd-{node}")

    def start_slurmd(self, node: str, booted: bool = False) -> None:
        """(Re)start one node's slurmd; a DOWN node returns to service when it registers. ``booted``:
        report the start as the node's boot (`slurmd -b`), as after a reboot Slurm asked for
        (opsctl.sim.reboot, the RebootProgram; the nodes share this host's uptime)."""
        self._check_node(node)
        spool = self.state_dir / "slurm" / "spool" / node
        spool.mkdir(parents=True, exist_ok=True)
        argv = ["slurmd", "-D", "-N", node, "-f", str(self.slurm_conf), *(["-b"] if booted else [])]
        env = {**self.env, reboot.NODE_ENV: node, reboot.STATE_ENV: str(self.state_dir)}
        self.spawn(f"slurmd-{node}", argv, env=env)

    def slurmd_running(self, node: str) -> bool:
        return self.procs.alive(f"slurmd-{node}")

    def _check_node(self, node: str) -> None:
        state = self.load_state()
        known = state.nodes if state else self.node_names_fresh()
        if node not in known:
            raise UsageError(f"unknown sim node {node!r}")

    # -- waiting ---------------------------------------------------------------------------
    def sinfo_states(self) -> dict[str, str]:
        """node -> `sinfo` long state (idle, drained, down*, ...), {} while slurmctld is not answering."""
        try:
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=self.env,
                timeout=30, check=False,
            )
        except subprocess.TimeoutExpired:
            return {}
        if out.returncode != 0:
            return {}
        states = {}
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_nodes_idle(self, nodes: Sequence[str], timeout: float) -> None:
        watch = ["munged", "slurmctld", *(f"slurmd-{n}" for n in nodes)]
        self.wait_for(lambda s: all(s.get(n) == "idle" for n in nodes), timeout, "nodes to become idle",
                      watch)

    def wait_for(
        self, predicate: Any, timeout: float, what: str, watch: Sequence[str] = ()
    ) -> dict[str, str]:
        """Poll sinfo until `predicate(states)` holds; SimError with the last states otherwise, or
        at once when a daemon named in `watch` has exited (with the end of its log)."""
        last: dict[str, dict[str, str]] = {"states": {}}

        @retry(stop=stop_after_delay(timeout), wait=wait_fixed(0.5), retry=retry_if_result(lambda ok: not ok))
        def poll() -> bool:
            for name in watch:
                if not self.procs.alive(name):
                    raise SimError(f"{name} exited: {self.log_tail(name)}")
            last["states"] = self.sinfo_states()
            return bool(last["states"]) and bool(predicate(last["states"]))

        try:
            poll()
        except RetryError:
            summary = _summarize(last["states"])
            raise SimError(f"timed out after {timeout:.0f}s waiting for {what} (states: {summary}); "
                           f"logs in {self.state_dir / 'log'}") from None
        return last["states"]

    def _wait_ctld(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.procs.alive("slurmctld"):
                raise SimError(f"slurmctld exited: {self.log_tail('slurmctld')}")
            if self.sinfo_states() or self._ctld_answers():
                return
            time.sleep(0.3)
        raise SimError(f"slurmctld did not answer within 60s: {self.log_tail('slurmctld')}")

    def _ctld_answers(self) -> bool:
        out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env=self.env,
                             timeout=30, check=False)
        return "is UP" in out.stdout

    def log_tail(self, name: str) -> str:
        """The last lines a daemon wrote (its stdout/stderr log, then Slurm's own log file)."""
        if name.startswith("slurmd-"):
            daemon_log = name.replace("slurmd-", "slurmd-daemon-", 1)
        else:
            daemon_log = f"{name}-daemon"
        lines: list[str] = []
        for path in (self.state_dir / "log" / f"{name}.log", self.state_dir / "log" / f"{daemon_log}.log"):
            try:
                lines += [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
            except OSError:
                continue
        errors = [line for line in lines if "error" in line.lower() or "fatal" in line.lower()]
        return " | ".join((errors or lines)[-3:]) or "(empty log)"

    # -- setup -----------------------------------------------------------------------------
    def _check_tools(self) -> None:
        tools = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol")
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            raise ConfigError(f"missing programs: {', '.join(missing)} (run scripts/bootstrap.sh)")
        if len(str(self.munge_socket)) > _UNIX_PATH_MAX - 8:
            raise ConfigError(f"state dir path too long for a unix socket: {self.state_dir}")

    def _prepare_dirs(self) -> None:
        for sub in ("etc", "run", "log", "munge", "dev", "slurm/state", "slurm/spool"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        # A fresh cluster each time: no job or node state from an earlier run.
        for sub in ("slurm/state", "slurm/spool"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        # munged insists on a private key and on a socket directory others can traverse.
        os.chmod(self.state_dir, 0o755)
        os.chmod(self.state_dir / "munge", 0o755)
        for i in range(GPUS_PER_NODE):
            (self.state_dir / "dev" / f"nvidia{i}").touch()

    def _start_munge(self) -> None:
        key = self.state_dir / "munge" / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(1024))
        self.munge_socket.unlink(missing_ok=True)
        munge_dir = self.state_dir / "munge"
        self.spawn("munged", [
            "munged", "--foreground", "--force",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--log-file={self.state_dir / 'log' / 'munged-daemon.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        ])
        deadline = time.monotonic() + 30
        while not self.munge_socket.exists():
            if not self.procs.alive("munged"):
                raise SimError(f"munged exited: {self.log_tail('munged')}")
            if time.monotonic() > deadline:
                raise SimError("munged did not create its socket within 30s")
            time.sleep(0.1)

    def _write_files(self, state: SimState) -> None:
        d = self.state_dir
        lines = [
            _CONF_MARKER,
            f"ClusterName=sim{secrets.token_hex(3)}",
            f"SlurmctldHost={state.hostname}(127.0.0.1)",
            f"SlurmctldPort={state.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'slurm' / 'state'}",
            f"SlurmdSpoolDir={d / 'slurm' / 'spool' / '%n'}",
            f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld-daemon.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd-daemon-%n.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            # The node's real hardware is not the simulated node's: trust the configured values.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            f"SlurmdTimeout={state.slurmd_timeout}",
            "SlurmctldTimeout=30",
            "MinJobAge=3600",
            "KillWait=5",
            "InactiveLimit=0",
            "PropagateResourceLimits=NONE",
            "MailProg=/bin/true",
            # `scontrol reboot`: the node's simulated hardware boots again (opsctl.sim.reboot)
            f'RebootProgram="{sys.executable} -m opsctl.sim.reboot"',
            "ResumeTimeout=60",
        ]
        for node in state.nodes:
            lines.append(
                f"NodeName={node} NodeHostname={state.hostname} NodeAddr=127.0.0.1 "
                f"Port={state.node_ports[node]} CPUs={self.cpus_per_node} RealMemory={self.memory_mb} "
                f"Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} State=UNKNOWN"
            )
        lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.slurm_conf.write_text("\n".join(lines) + "\n")
        from opsctl.nodeset import fold

        (self.slurm_conf.parent / "gres.conf").write_text(
            "AutoDetect=off\n"
            f"NodeName={fold(state.nodes)} Name=gpu Type={GPU_TYPE} "
            f"File={d / 'dev'}/nvidia[0-{GPUS_PER_NODE - 1}]\n"
        )
        self.config_path.unlink(missing_ok=True)
        self.set_config("slurm", backend="cli", partition=PARTITION, slurm_conf=str(self.slurm_conf),
                        command_timeout=60)
        self.set_config("guardrails", max_drain_fraction=0.10, min_drain_nodes=1)
        self.set_config("audit", log=str(self.audit_log))
        # The health policy's memory (its drains for the brake, clean streaks) is per cluster.
        self.set_config("health", state_file=str(self.state_dir / "health-state.json"),
                        decision_log=str(self.state_dir / "health-decisions.jsonl"))

    def set_config(self, section: str, **values: Any) -> None:
        """Set keys in this cluster's opsctl.toml (add-ons use it, e.g. `[prometheus] url`)."""
        tables: dict[str, dict[str, Any]] = {}
        if self.config_path.exists():
            tables = tomllib.loads(self.config_path.read_text())
        tables.setdefault(section, {}).update(values)
        lines = ["# Written by opsctl sim for the simulated cluster in this directory."]
        for name, table in tables.items():
            lines.append(f"\n[{name}]")
            lines.extend(f"{key} = {_toml_value(value)}" for key, value in table.items())
        self.config_path.write_text("\n".join(lines) + "\n")

    def _cancel_jobs(self) -> None:
        """Cancel every job so slurmstepd and job processes exit before slurmd goes."""
        try:
            out = subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True,
                                 env=self.env, timeout=20, check=False)
            ids = [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()]
            if ids:
                subprocess.run(["scancel", *ids], capture_output=True, env=self.env, timeout=20, check=False)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    left = subprocess.run(["squeue", "-h", "-t", "R,CG", "-o", "%A"], capture_output=True,
                                          text=True, env=self.env, timeout=20, check=False)
                    if not left.stdout.strip():
                        break
                    time.sleep(0.3)
        except subprocess.TimeoutExpired:
            pass


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _summarize(states: Mapping[str, str]) -> str:
    if not states:
        return "slurmctld not answering"
    counts: dict[str, int] = {}
    for value in states.values():
        counts[value] = counts.get(value, 0) + 1
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
