"""Evidence read on the nodes themselves over SSH (paramiko): nvidia-smi, NVLink status, the
InfiniBand sysfs tree (sampled twice for counter deltas), kernel XIDs, mounts and slurmd.

Connections run in parallel (bounded), host keys are verified against a known_hosts file (an
unknown or changed key refuses the node, it is never added), and every node has its own deadline.
Only fixed commands are sent; node names never reach a shell (they are only connection targets),
and configured mount paths are quoted.

On a lab machine the sysfs root can be moved with ``OPSCTL_IB_SYSFS_ROOT`` in the remote
environment (the simulated hardware writes its tree there); production nodes use the default.
"""

from __future__ import annotations

import concurrent.futures
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opsctl.address import split_address
from opsctl.evidence.convert import gpus_from_nvidia_smi, ib_from_sysfs, xids_from_dmesg
from opsctl.evidence.model import Evidence, MountEvidence
from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.ib_sysfs import DEFAULT_ROOT, grep_argv, parse_grep_output, parse_ib_sysfs
from opsctl.parsers.lfs_check import parse_lfs_check_servers
from opsctl.parsers.nvidia_smi_nvlink import parse_nvlink_status
from opsctl.parsers.nvidia_smi_q import parse_nvidia_smi_q

SSH_FACTS = frozenset(
    {
        "gpu_count",
        "xid",
        "ecc",
        "retired_pages",
        "row_remap",
        "nvlink",
        "pcie",
        "throttle",
        "ib",
        "ib_errors",
        "mounts",
        "slurmd",
    }
)
_SPLIT = "@@opsctl-sample@@"


def ib_root_pick(root: str | None) -> str:
    """Shell that sets ``r`` to the InfiniBand sysfs root: $OPSCTL_IB_SYSFS_ROOT on the node wins
    (the simulated trees of the test rigs), then the configured root, then the kernel's."""
    return f'r="${{OPSCTL_IB_SYSFS_ROOT:-}}"; [ -n "$r" ] || r={shlex.quote(root or DEFAULT_ROOT)}'


def _ib_command(sample_seconds: float, root: str | None = None) -> str:
    # Globs stay outside quotes so the remote shell expands them under the (quoted) root.
    globs = " ".join('"$r"' + g[len("/ROOT") :] for g in grep_argv("/ROOT"))
    grep = f"grep -sH . {globs}"  # -H: name the file even when one matches
    pick = ib_root_pick(root)
    return f'{pick}; echo "@root=$r"; {grep}; echo {_SPLIT}; sleep {sample_seconds:g}; {grep}; true'


def address_map(addresses: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """``{node: "host[:port]"}`` -> (SshSettings.hosts, SshSettings.ports)."""
    hosts: dict[str, str] = {}
    ports: dict[str, int] = {}
    for node, addr in addresses.items():
        host, port = split_address(addr)
        hosts[node] = host
        if port is not None:
            ports[node] = port
    return hosts, ports


@dataclass
class CommandResult:
    rc: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass
class SshSettings:
    user: str = "root"
    port: int = 22
    key_filename: str | None = None
    known_hosts: str | None = None  # None: the user's ~/.ssh/known_hosts
    connect_timeout: float = 10.0
    node_timeout: float = 60.0  # the whole collection for one node
    parallel: int = 16
    ib_sample_seconds: float = 2.0
    required_mounts: list[dict[str, str]] = field(default_factory=list)
    hosts: dict[str, str] = field(default_factory=dict)  # node -> address (default: the node name)
    ports: dict[str, int] = field(default_factory=dict)  # node -> port (default: port)
    ib_sysfs_root: str | None = None  # None: /sys/class/infiniband ($OPSCTL_IB_SYSFS_ROOT wins)


def commands(settings: SshSettings) -> dict[str, str]:
    cmds = {
        "boot_id": "cat /proc/sys/kernel/random/boot_id",
        "uptime": "cat /proc/uptime",
        "nvidia_smi": "nvidia-smi -q",
        "nvlink": "nvidia-smi nvlink -s",
        "ib": _ib_command(settings.ib_sample_seconds, settings.ib_sysfs_root),
        "dmesg": "dmesg",
        "slurmd": "pgrep -x slurmd",
        "mounts": "cat /proc/mounts",
    }
    for i, m in enumerate(settings.required_mounts):
        cmds[f"statfs{i}"] = f"timeout 10 stat -f -c %T -- {shlex.quote(m['path'])}"
    if any(m.get("fstype") == "lustre" for m in settings.required_mounts):
        cmds["lfs"] = "timeout 20 lfs check servers"
    return cmds


# -- pure: command outputs -> evidence ---------------------------------------------------------
def evidence_from_outputs(
    node: str, out: dict[str, CommandResult], now: float, settings: SshSettings
) -> Evidence:
    ev = Evidence(node=node, source="ssh", collected_at=now, provides=SSH_FACTS)
    boot = out.get("boot_id")
    ev.boot_id = boot.stdout.strip() if boot and boot.ok else ""
    uptime: float | None = None
    up = out.get("uptime")
    if up and up.ok and up.stdout.split():
        uptime = float(up.stdout.split()[0])

    smi = out.get("nvidia_smi")
    if smi and smi.ok:
        report = parse_nvidia_smi_q(smi.stdout)
        ev.gpus = gpus_from_nvidia_smi(report)
        ev.gpu_count = len(ev.gpus)
        ev.raw["driver_version"] = report.driver_version
    elif smi and smi.rc != 127:
        # nvidia-smi exists but failed (e.g. "No devices were found", a GPU off the bus): zero GPUs
        ev.gpu_count = 0
        ev.raw["nvidia_smi_error"] = (smi.stderr or smi.stdout).strip()[:200]
    nvl = out.get("nvlink")
    if nvl and nvl.ok and ev.gpus:
        links = {g.index: g for g in parse_nvlink_status(nvl.stdout)}
        for g in ev.gpus:
            status = links.get(g.index)
            if status is not None:
                g.nvlink_links_total = len(status.links)
                g.nvlink_links_down = (
                    status.links_down if not status.all_inactive else max(1, len(status.links))
                )

    dm = out.get("dmesg")
    if dm and dm.ok:
        ev.xids = xids_from_dmesg(parse_dmesg_xids(dm.stdout), ev.gpus, ev.boot_id, now, uptime)

    ib = out.get("ib")
    if ib and ib.ok:
        root_line, _, rest = ib.stdout.partition("\n")
        root = root_line.removeprefix("@root=").strip() or "/sys/class/infiniband"
        first, _, second = rest.partition(_SPLIT)
        before = parse_ib_sysfs(parse_grep_output(first, root))
        after = parse_ib_sysfs(parse_grep_output(second, root)) if second.strip() else before
        previous = {f"{d.name}/{p.number}": p.counters for d in before for p in d.ports}
        ev.ib_ports = ib_from_sysfs(after, previous, settings.ib_sample_seconds)

    sl = out.get("slurmd")
    if sl is not None:
        ev.slurmd_alive = sl.ok and bool(sl.stdout.strip())

    mounts_out = out.get("mounts")
    if settings.required_mounts and mounts_out and mounts_out.ok:
        mounted = {}
        for line in mounts_out.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3:
                mounted[parts[1]] = parts[2]
        lfs = out.get("lfs")
        ev.mounts = []
        for i, req in enumerate(settings.required_mounts):
            path, fstype = req["path"], req.get("fstype", "")
            present = path in mounted and (not fstype or mounted[path] == fstype)
            stat = out.get(f"statfs{i}")
            responsive: bool | None = stat.ok if stat is not None else None
            detail = "" if responsive else (stat.stderr.strip()[:120] if stat else "")
            if present and fstype == "lustre" and lfs is not None:
                check = parse_lfs_check_servers(lfs.stdout)
                if not check.healthy:
                    responsive = False
                    detail = "lfs check servers: " + "; ".join(list(check.failed.values())[:2])[:120]
            ev.mounts.append(MountEvidence(path, mounted.get(path, fstype), present, responsive, detail))
    return ev


# -- I/O ----------------------------------------------------------------------------------------
Runner = Callable[[str, list[str], float], dict[str, CommandResult]]


@dataclass
class NodeRun:
    """The outputs of fixed commands on one node, or why they could not be had."""

    node: str
    outputs: dict[str, CommandResult] = field(default_factory=dict)
    error: str = ""  # unreachable, refused host key, timed out: the node's outputs are not usable


def run_on_nodes(settings: SshSettings, nodes: list[str], cmds: dict[str, str]) -> list[NodeRun]:
    """Run ``cmds`` (key -> fixed shell command) on every node, in parallel (``settings.parallel``),
    each node within its own deadline; results in the order of ``nodes``. Shared by every source
    that reads nodes over SSH (health, dcgm, preflight)."""
    results: dict[str, NodeRun] = {}
    workers = max(1, min(settings.parallel, len(nodes)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_run_on_node, settings, node, cmds): node for node in nodes}
        for fut in concurrent.futures.as_completed(futures):
            node = futures[fut]
            try:
                results[node] = fut.result()
            except Exception as exc:  # a node's failure is that node's, not the run's
                results[node] = NodeRun(node, error=f"{type(exc).__name__}: {exc}"[:200])
    return [results[n] for n in nodes]


def _run_on_node(s: SshSettings, node: str, cmds: dict[str, str]) -> NodeRun:
    import paramiko

    host = s.hosts.get(node, node)
    port = s.ports.get(node, s.port)
    deadline = time.monotonic() + s.node_timeout
    client = paramiko.SSHClient()
    try:
        if s.known_hosts:
            client.load_host_keys(s.known_hosts)
        else:
            client.load_system_host_keys()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                host,
                port=port,
                username=s.user,
                key_filename=s.key_filename,
                timeout=s.connect_timeout,
                banner_timeout=s.connect_timeout,
                auth_timeout=s.connect_timeout,
                allow_agent=False,
                look_for_keys=s.key_filename is None,
            )
        except paramiko.BadHostKeyException:
            return NodeRun(node, error="host key mismatch: refused")
        except paramiko.SSHException as exc:
            return NodeRun(node, error=f"ssh: {exc}"[:200])
        except OSError as exc:
            return NodeRun(node, error=f"unreachable: {exc.strerror or exc}"[:200])
        out: dict[str, CommandResult] = {}
        for key, cmd in cmds.items():
            left = deadline - time.monotonic()
            if left <= 0:
                return NodeRun(node, out, error=f"timed out after {s.node_timeout:g}s (at {key})")
            out[key] = _run(client, cmd, left)
        return NodeRun(node, out)
    finally:
        client.close()


class SshSource:
    name = "ssh"

    def __init__(self, settings: SshSettings | None = None) -> None:
        self.settings = settings or SshSettings()

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        settings = self.settings
        return self._collect_with(
            nodes, now, commands(settings), lambda node, out, t: evidence_from_outputs(node, out, t, settings)
        )

    def _collect_with(
        self,
        nodes: list[str],
        now: float,
        cmds: dict[str, str],
        build: Callable[[str, dict[str, CommandResult], float], Evidence],
    ) -> list[Evidence]:
        evidence = []
        for run in run_on_nodes(self.settings, nodes, cmds):
            if run.error:
                evidence.append(Evidence(run.node, "ssh", now, reachable=False, error=run.error))
                continue
            try:
                evidence.append(build(run.node, run.outputs, now))
            except Exception as exc:  # a node's bad output is that node's UNKNOWN, not the run's
                error = f"{type(exc).__name__}: {exc}"[:200]
                evidence.append(Evidence(run.node, "ssh", now, reachable=False, error=error))
        return evidence


def _run(client: Any, cmd: str, timeout: float) -> CommandResult:
    _stdin, stdout, stderr = client.exec_command(cmd, timeout=timeout)
    try:
        data = stdout.read().decode("utf-8", "replace")
        err = stderr.read().decode("utf-8", "replace")
        rc = stdout.channel.recv_exit_status()
    except TimeoutError as exc:
        raise TimeoutError(f"command timed out: {cmd.split()[0]}") from exc
    return CommandResult(rc, data, err)
