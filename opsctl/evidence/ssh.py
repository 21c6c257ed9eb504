"""Evidence read on the nodes themselves over SSH (paramiko): nvidia-smi, NVLink status, the
InfiniBand sysfs tree (sampled twice for counter deltas), kernel XIDs, mounts, slurmd and, where
``lustre_mount`` is set, the Lustre client probe (opsctl.parsers.lustre_probe).

The kernel log is read since the previous pass, not as a snapshot: ``journalctl -k -b
--show-cursor --after-cursor=C`` with the cursor of each node's last pass (the whole current boot on
the first pass, or after a reboot), and ``dmesg`` where the journal cannot be read (said in
``Evidence.raw["kernel_log"]``). Since a pass only returns new lines, the source remembers the XIDs
and SXids of the node's current boot (``kernel_log_retention``) and reports them with every pass;
``cursors()`` / ``load_cursors()`` let a long-running caller persist that state. Probes that can hang
(nvidia-smi, ``stat -f`` of a mount) run under ``timeout`` and are reported in
``Evidence.probe_timeouts`` when they do.

Connections run in parallel (bounded), host keys are verified against a known_hosts file (an
unknown or changed key refuses the node, it is never added), and every node has its own deadline.
Only fixed commands are sent; node names never reach a shell (they are only connection targets),
and configured mount paths are quoted.

On a lab machine the sysfs root can be moved with ``OPSCTL_IB_SYSFS_ROOT`` in the remote
environment (the simulated hardware writes its tree there); production nodes use the default.
"""

from __future__ import annotations

import concurrent.futures
import re
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from opsctl.address import split_address
from opsctl.evidence.convert import gpus_from_nvidia_smi, ib_from_sysfs, sxids_from_dmesg, xids_from_dmesg
from opsctl.evidence.model import BOOT_KERNEL, Evidence, LustreEvidence, MountEvidence, SxidEvent, XidEvent
from opsctl.parsers.dmesg_xid import parse_dmesg_xids
from opsctl.parsers.ib_sysfs import DEFAULT_ROOT, grep_argv, parse_grep_output, parse_ib_sysfs
from opsctl.parsers.journal_kernel import parse_journal_kernel, valid_cursor
from opsctl.parsers.lfs_check import parse_lfs_check_servers
from opsctl.parsers.lustre_probe import MARK as LUSTRE_MARK
from opsctl.parsers.lustre_probe import parse_lustre_probe, probe_command
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
        "recovery",
        "fabric",
        "sxid",
    }
)
_SPLIT = "@@opsctl-sample@@"
_FALLBACK = "@opsctl-kernel-log:"  # first line when the journal could not be read and dmesg follows
# after the journal's lines: the kernel ring buffer too, for lines the journal did not keep (journald
# rate limits, a journal that does not collect kernel messages); lines both show are counted once
_RING = "@opsctl-ring-buffer"
TIMED_OUT = frozenset({124, 137})  # timeout(1): 124 after TERM, 128+9 when it had to KILL
_BOOT_ID_RE = re.compile(r"^[0-9a-f-]{32,36}$")
_KEEP_EVENTS = 5000  # per node and kind: a storm must not grow the remembered state without bound


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
    # under node_timeout together: a hung call is reported in probe_timeouts (GPU facts unknown); a
    # process the KILL cannot end (uninterruptible driver wait) runs the node into node_timeout
    nvidia_smi_timeout: float = 15.0
    mount_timeout: float = 10.0  # stat -f of a required mount
    journal_timeout: float = 20.0
    # how long XIDs/SXids of the current boot are remembered between passes; keep it at least as
    # long as [xid] window_seconds
    kernel_log_retention: float = 86400.0
    # The Lustre probe (lctl ping of lustre_nids, lfs check servers, a timed direct write of
    # lustre_write_mib on the mount), each step under lustre_timeout; None: no Lustre here, the
    # lustre check does not apply.
    lustre_mount: str | None = None
    lustre_nids: list[str] = field(default_factory=list)
    lustre_write_mib: int = 16
    lustre_timeout: float = 30.0
    lustre_max_write_seconds: float | None = None  # None: a slow write is not judged


def _bounded(seconds: float, cmd: str) -> str:
    """``cmd`` under timeout(1); KILL 5 s after TERM for a process that ignores TERM."""
    return f"timeout -k 5 {seconds:g} {cmd}"


def kernel_log_command(cursor: str = "", boot_id: str = "", timeout: float = 30.0) -> str:
    """Kernel lines of the current boot after ``cursor`` (all of them without one, or when the node
    booted since ``boot_id``), from the journal; ``dmesg`` after a marker line when the journal
    cannot be read. Only a well-formed cursor and boot id ever reach the shell."""
    pick = "a="
    if cursor and valid_cursor(cursor) and _BOOT_ID_RE.match(boot_id):
        after = shlex.quote(f"--after-cursor={cursor}")
        pick = f'a=; [ "$(cat /proc/sys/kernel/random/boot_id)" = {boot_id} ] && a={after}'
    journal = _bounded(timeout, "journalctl -k -b --no-pager -o short-monotonic --show-cursor")
    return (
        f"{pick}; if command -v journalctl >/dev/null 2>&1; then "
        f'j=$({journal} $a 2>&1); rc=$?; case "$j" in *"-- cursor: "*) printf "%s\\n" "$j"; '
        f'echo "{_RING}"; dmesg; exit 0;; esac; '
        f'echo "{_FALLBACK} journalctl rc=$rc: $(printf "%s" "$j" | tail -n 1)"; '
        f'else echo "{_FALLBACK} journalctl not found"; fi; dmesg'
    )


def commands(settings: SshSettings, cursor: str = "", boot_id: str = "") -> dict[str, str]:
    smi = settings.nvidia_smi_timeout
    cmds = {
        "boot_id": "cat /proc/sys/kernel/random/boot_id",
        "uptime": "cat /proc/uptime",
        "nvidia_smi": _bounded(smi, "nvidia-smi -q"),
        "nvlink": _bounded(smi, "nvidia-smi nvlink -s"),
        "ib": _ib_command(settings.ib_sample_seconds, settings.ib_sysfs_root),
        "kernel_log": kernel_log_command(cursor, boot_id, settings.journal_timeout),
        "slurmd": "pgrep -x slurmd",
        "mounts": "cat /proc/mounts",
    }
    for i, m in enumerate(settings.required_mounts):
        cmds[f"statfs{i}"] = _bounded(settings.mount_timeout, f"stat -f -c %T -- {shlex.quote(m['path'])}")
    if any(m.get("fstype") == "lustre" for m in settings.required_mounts):
        cmds["lfs"] = _bounded(20, "lfs check servers")
    if settings.lustre_mount:
        cmds["lustre"] = lustre_command(settings)
    return cmds


def lustre_command(settings: SshSettings) -> str:
    """The Lustre probe, only where the mount point holds a mounted Lustre file system: the write
    must never land on the directory beneath a missing mount."""
    mount = settings.lustre_mount or ""
    probe = probe_command(
        mount, settings.lustre_nids, settings.lustre_write_mib, max(1, int(settings.lustre_timeout))
    )
    return (
        f"if findmnt -rn -t lustre -M {shlex.quote(mount)} >/dev/null 2>&1; then {probe}; "
        f'else echo "{LUSTRE_MARK} {_NOT_MOUNTED}"; fi'
    )


_NOT_MOUNTED = "not-mounted"


def _lustre(out: dict[str, CommandResult], settings: SshSettings) -> LustreEvidence | None:
    """The probe's output judged into evidence; None when it did not run (unknown)."""
    res = out.get("lustre")
    mount = settings.lustre_mount or ""
    if res is None or (not res.stdout.strip() and not res.ok):
        return None
    if f"{LUSTRE_MARK} {_NOT_MOUNTED}" in res.stdout:
        return LustreEvidence(mount, mounted=False, problems=[f"{mount} is not a mounted Lustre file system"])
    probe = parse_lustre_probe(res.stdout)
    timed_out = [f"lctl ping {p.target}" for p in probe.pings if p.error == "timed out"]
    if probe.servers is not None and probe.servers.failed.get("lfs check servers") == "timed out":
        timed_out.append("lfs check servers")
    if probe.write is not None and probe.write.error == "timed out":
        timed_out.append("write probe")
    problems = [p for p in probe.problems(settings.lustre_max_write_seconds) if not p.endswith("timed out")]
    return LustreEvidence(
        mount,
        mounted=True,
        problems=problems,
        timed_out=timed_out,
        nids_pinged=sum(1 for p in probe.pings if p.ok),
        servers_active=len(probe.servers.active) if probe.servers else 0,
        write_seconds=probe.write.seconds if probe.write and probe.write.ok else None,
        write_bytes=probe.write.bytes if probe.write and probe.write.ok else 0,
    )


def _kernel_text(ev: Evidence, out: dict[str, CommandResult]) -> str | None:
    """The kernel log lines of this pass (journal or dmesg), or None when neither could be read."""
    kl = out.get("kernel_log")
    if kl is None:  # a caller that ran plain dmesg
        dm = out.get("dmesg")
        if dm is None or not dm.ok:
            return None
        ev.raw["kernel_log"] = {"via": "dmesg"}
        return dm.stdout
    first, _, rest = kl.stdout.partition("\n")
    if first.startswith(_FALLBACK):
        why = first[len(_FALLBACK) :].strip()[:200]
        ev.raw["kernel_log"] = {"via": "dmesg", "journal_error": why}
        if not kl.ok:
            ev.raw["kernel_log"]["dmesg_error"] = (kl.stderr.strip() or f"rc {kl.rc}")[:200]
            return None
        return rest
    if not kl.ok:
        ev.raw["kernel_log"] = {"via": "none", "error": (kl.stderr.strip() or f"rc {kl.rc}")[:200]}
        return None
    journal_out, _, ring = kl.stdout.partition(f"\n{_RING}\n")
    chunk = parse_journal_kernel(journal_out)
    ev.raw["kernel_log"] = {"via": "journal", "cursor": chunk.cursor, "lines": chunk.entries}
    seen = {_line_key(x) for x in chunk.text.splitlines()}
    extra = [x for x in ring.splitlines() if _XIDISH in x and _line_key(x) not in seen]
    if extra:
        ev.raw["kernel_log"]["ring_buffer_only"] = len(extra)
    return "\n".join([chunk.text, *extra]) if extra else chunk.text


_XIDISH = "Xid ("  # XID and SXid lines: what the ring buffer may add to the journal


def _line_key(line: str) -> str:
    """A kernel line as both the journal (short-monotonic) and dmesg print it: its message."""
    for mark in ("NVRM: ", "nvidia-nvswitch"):
        i = line.find(mark)
        if i >= 0:
            return line[i:].strip()
    return line.strip()


# -- pure: command outputs -> evidence ---------------------------------------------------------
def evidence_from_outputs(
    node: str, out: dict[str, CommandResult], now: float, settings: SshSettings
) -> Evidence:
    ev = Evidence(node=node, source="ssh", collected_at=now, provides=SSH_FACTS)
    boot = out.get("boot_id")
    ev.boot_id = boot.stdout.strip() if boot and boot.ok else ""
    ev.boot_kind = BOOT_KERNEL if ev.boot_id else ""
    uptime: float | None = None
    up = out.get("uptime")
    if up and up.ok and up.stdout.split():
        uptime = float(up.stdout.split()[0])
        ev.boot_time = now - uptime

    smi = out.get("nvidia_smi")
    if smi and smi.ok:
        report = parse_nvidia_smi_q(smi.stdout)
        ev.gpus = gpus_from_nvidia_smi(report)
        ev.gpu_count = len(ev.gpus)
        ev.raw["driver_version"] = report.driver_version
    elif smi and smi.rc in TIMED_OUT:
        # a hung driver call says nothing about how many GPUs there are: unknown, not zero
        ev.probe_timeouts.append("nvidia-smi")
    elif smi and smi.rc != 127:
        # nvidia-smi exists but failed (e.g. "No devices were found", a GPU off the bus): zero GPUs
        ev.gpu_count = 0
        ev.raw["nvidia_smi_error"] = (smi.stderr or smi.stdout).strip()[:200]
    nvl = out.get("nvlink")
    if nvl and nvl.rc in TIMED_OUT and "nvidia-smi" not in ev.probe_timeouts:
        ev.probe_timeouts.append("nvidia-smi")
    if nvl and nvl.ok and ev.gpus:
        links = {g.index: g for g in parse_nvlink_status(nvl.stdout)}
        for g in ev.gpus:
            status = links.get(g.index)
            if status is not None:
                g.nvlink_links_total = len(status.links)
                g.nvlink_links_down = (
                    status.links_down if not status.all_inactive else max(1, len(status.links))
                )

    text = _kernel_text(ev, out)
    if text is not None:
        log = parse_dmesg_xids(text)
        ev.xids = xids_from_dmesg(log, ev.gpus, ev.boot_id, now, uptime)
        ev.sxids = sxids_from_dmesg(log, ev.boot_id, now, uptime)
        ev.xid_mode = "kernel-log"

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
            if stat is not None and stat.rc in TIMED_OUT:
                # hung, not failed: UNKNOWN in this pass; the service counts passes in a row
                responsive, detail = None, f"stat -f timed out after {settings.mount_timeout:g}s"
                ev.probe_timeouts.append(f"mount:{path}")
            elif present and fstype == "lustre" and lfs is not None and lfs.rc in TIMED_OUT:
                responsive, detail = None, "lfs check servers timed out"
                ev.probe_timeouts.append(f"mount:{path}")
            elif present and fstype == "lustre" and lfs is not None:
                check = parse_lfs_check_servers(lfs.stdout)
                if not check.healthy:
                    responsive = False
                    detail = "lfs check servers: " + "; ".join(list(check.failed.values())[:2])[:120]
            ev.mounts.append(MountEvidence(path, mounted.get(path, fstype), present, responsive, detail))
    if settings.lustre_mount:
        ev.provides = ev.provides | {"lustre"}
        ev.lustre = _lustre(out, settings)
        if ev.lustre is not None and ev.lustre.timed_out:
            # hung, not failed: UNKNOWN in this pass; the policy counts passes in a row (probe-hung)
            ev.probe_timeouts.append(f"lustre:{ev.lustre.mount}")
    return ev


# -- I/O ----------------------------------------------------------------------------------------
Runner = Callable[[str, list[str], float], dict[str, CommandResult]]


@dataclass
class NodeRun:
    """The outputs of fixed commands on one node, or why they could not be had."""

    node: str
    outputs: dict[str, CommandResult] = field(default_factory=dict)
    error: str = ""  # unreachable, refused host key, timed out: the node's outputs are not usable


def run_on_nodes(
    settings: SshSettings,
    nodes: list[str],
    cmds: dict[str, str],
    per_node: dict[str, dict[str, str]] | None = None,
) -> list[NodeRun]:
    """Run ``cmds`` (key -> fixed shell command) on every node, in parallel (``settings.parallel``),
    each node within its own deadline; results in the order of ``nodes``. ``per_node`` replaces
    some commands for some nodes (the kernel log's cursor). Shared by every source that reads nodes
    over SSH (health, dcgm, preflight)."""
    results: dict[str, NodeRun] = {}
    workers = max(1, min(settings.parallel, len(nodes)))
    extra = per_node or {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(_run_on_node, settings, node, {**cmds, **extra.get(node, {})}): node for node in nodes
        }
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


_NOT_STORED = frozenset({"counted_now", "recovery_action", "recovery_from", "uncounted"})


@dataclass
class KernelLogState:
    """What the source remembers of one node's kernel log between passes."""

    boot_id: str = ""
    cursor: str = ""  # journal cursor of the last line read; "" = read the whole boot next time
    xids: list[XidEvent] = field(default_factory=list)
    sxids: list[SxidEvent] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "boot_id": self.boot_id,
            "cursor": self.cursor,
            # counted_now, uncounted and the recovery action an XID 154 carries are an exporter's, never
            # a log line's: the stored form stays as it was
            "xids": [{k: v for k, v in asdict(e).items() if k not in _NOT_STORED} for e in self.xids],
            "sxids": [asdict(e) for e in self.sxids],
        }


def _events(cls: type[Any], items: Any) -> list[Any]:
    """Rebuild events from their JSON form; anything malformed raises ValueError."""
    if not isinstance(items, list):
        raise ValueError("events must be a list")
    names = {f.name for f in fields(cls)}
    out = []
    for item in items:
        if not isinstance(item, dict) or not set(item) <= names:
            raise ValueError(f"bad event {item!r}"[:80])
        e = cls(**item)
        code = e.xid if isinstance(e, XidEvent) else e.sxid
        where = e.gpu if isinstance(e, XidEvent) else e.switch
        if not (
            isinstance(code, int)
            and isinstance(e.count, int)
            and all(v is None or isinstance(v, int | float) for v in (e.time, e.mono))
            and isinstance(e.boot_id, str)
            and isinstance(e.message, str)
            and (where is None or isinstance(where, int | str))
        ):
            raise ValueError(f"bad event {item!r}"[:80])
        out.append(e)
    return out


def _event_key(e: XidEvent | SxidEvent) -> tuple[Any, ...]:
    # The kernel's stamp and the device identify a log line whether the journal or dmesg showed it.
    if isinstance(e, XidEvent):
        return ("xid", e.xid, e.gpu, e.mono if e.mono is not None else e.message, e.boot_id)
    return ("sxid", e.sxid, e.switch, e.mono if e.mono is not None else e.message, e.boot_id)


_E = TypeVar("_E", XidEvent, SxidEvent)


def _merged(kept: list[_E], new: list[_E], horizon: float) -> list[_E]:
    """``kept`` plus the events of ``new`` it does not hold yet, without those older than horizon."""
    seen = {_event_key(e) for e in kept}
    out = kept + [e for e in new if _event_key(e) not in seen]
    return [e for e in out if e.time is None or e.time >= horizon][-_KEEP_EVENTS:]


class SshSource:
    name = "ssh"

    def __init__(self, settings: SshSettings | None = None) -> None:
        self.settings = settings or SshSettings()
        self._kernel: dict[str, KernelLogState] = {}
        self._lock = threading.Lock()

    def cursors(self) -> dict[str, dict[str, Any]]:
        """Each node's journal cursor, boot and remembered XIDs/SXids, JSON-serialisable."""
        with self._lock:
            return {node: st.to_json() for node, st in self._kernel.items()}

    def load_cursors(self, state: dict[str, Any]) -> list[str]:
        """Restore what :meth:`cursors` returned. A malformed node entry is left out (that node's
        next pass reads its whole current boot again, so nothing is lost); returns those nodes."""
        loaded: dict[str, KernelLogState] = {}
        rejected: list[str] = []
        for node, item in (state or {}).items():
            try:
                if not isinstance(item, dict):
                    raise ValueError("not a mapping")
                cursor, boot = str(item.get("cursor", "")), str(item.get("boot_id", ""))
                if (cursor and not valid_cursor(cursor)) or (boot and not _BOOT_ID_RE.match(boot)):
                    raise ValueError("bad cursor or boot id")
                xids = _events(XidEvent, item.get("xids", []))
                sxids = _events(SxidEvent, item.get("sxids", []))
                loaded[str(node)] = KernelLogState(boot, cursor, xids, sxids)
            except (TypeError, ValueError):
                rejected.append(str(node))
        with self._lock:
            self._kernel.update(loaded)
        return rejected

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        settings = self.settings
        with self._lock:
            per_node = {
                n: {"kernel_log": kernel_log_command(st.cursor, st.boot_id, settings.journal_timeout)}
                for n, st in self._kernel.items()
                if n in nodes and st.cursor
            }

        def build(node: str, out: dict[str, CommandResult], t: float) -> Evidence:
            return self._remember(evidence_from_outputs(node, out, t, settings), t)

        return self._collect_with(nodes, now, commands(settings), build, per_node)

    def _remember(self, ev: Evidence, now: float) -> Evidence:
        """Merge this pass's new kernel lines into the node's memory and report all it holds."""
        if ev.xids is None or ev.sxids is None:
            return ev  # the kernel log could not be read: unknown, and the memory stays as it is
        with self._lock:
            st = self._kernel.get(ev.node)
            if st is None or (ev.boot_id and st.boot_id and ev.boot_id != st.boot_id):
                st = KernelLogState(boot_id=ev.boot_id)  # a new boot: earlier events are history
            st.boot_id = ev.boot_id or st.boot_id
            info = ev.raw.get("kernel_log", {})
            st.cursor = info.get("cursor", "") if info.get("via") == "journal" else ""
            horizon = now - self.settings.kernel_log_retention
            st.xids = _merged(st.xids, ev.xids, horizon)
            st.sxids = _merged(st.sxids, ev.sxids, horizon)
            self._kernel[ev.node] = st
            ev.xids, ev.sxids = list(st.xids), list(st.sxids)
        return ev

    def _collect_with(
        self,
        nodes: list[str],
        now: float,
        cmds: dict[str, str],
        build: Callable[[str, dict[str, CommandResult], float], Evidence],
        per_node: dict[str, dict[str, str]] | None = None,
    ) -> list[Evidence]:
        evidence = []
        for run in run_on_nodes(self.settings, nodes, cmds, per_node):
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
