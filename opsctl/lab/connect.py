"""Talk to the lab's Slurm and Prometheus from the host, so that `opsctl nodes/health/drain` work.

After site.yml has converged the lab, `opsctl lab connect` copies the head's slurm.conf (and the
files next to it) and the lab's munge key to the host, starts a host munged for that key on its
own socket (never the host's default one, which the simulated cluster may use), points the copied
slurm.conf at that socket with AuthInfo, and writes an opsctl.toml that names it. Then
`OPSCTL_CONFIG=<state>/opsctl.toml opsctl nodes` runs the host's Slurm client against the lab.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from opsctl.errors import Unreachable, UsageError
from opsctl.lab import labsim, machines
from opsctl.lab.config import LabConfig
from opsctl.lab.shell import run
from opsctl.lab.ssh import ssh, ssh_argv
from opsctl.nodeset import parse_nodeset

SLURM_DIR_IN_NODE = "/etc/slurm"
SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")
PROMETHEUS_PORT = 9090
LAB_GPU_GROUP_VARS = (
    Path(__file__).resolve().parents[2] / "inventory" / "lab" / "group_vars" / "gpu_nodes.yml"
)
HOST_KEY = "etc/ssh/ssh_host_ed25519_key.pub"
# Under the NFS share: the runs, and the python of the runtime roles/training_runtime builds
# (training_runtime_root/current).
RUNS_IN_SHARE = "runs"
RUNTIME_PYTHON_IN_SHARE = "opsctl/runtime/current/bin/python"


@dataclass(frozen=True)
class Connection:
    opsctl_toml: Path
    slurm_conf: Path
    munge_socket: Path
    prometheus_url: str


def host_dir(cfg: LabConfig) -> Path:
    return cfg.state_dir / "host"


def munge_pidfile(cfg: LabConfig) -> Path:
    return host_dir(cfg) / "munge" / "munged.pid"


def munge_socket_dir(cfg: LabConfig) -> Path:
    """munged insists every directory above its socket is world-searchable, which a private state
    dir (a test's temp dir) is not; so the socket lives under /run, named after the state dir."""
    digest = hashlib.sha256(str(cfg.state_dir.resolve()).encode()).hexdigest()[:12]
    return Path("/run") / f"opsctl-lab-{digest}"


def rewrite_slurm_conf(text: str, addresses: dict[str, str], munge_socket: Path) -> str:
    """The head's slurm.conf as the host must read it.

    The host cannot resolve lab names, so controller hosts get their address in parentheses (Slurm's
    `Name(Addr)` form) and node lines a `NodeAddr` list (what `srun` on the host needs to reach the
    machines' slurmd); authentication goes through the host's lab munged socket.
    """
    out = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        k = key.strip().lower()
        if sep and k in ("slurmctldhost", "controlmachine"):
            name = value.strip().split("(")[0].strip()
            addr = addresses.get(name)
            line = f"{key.strip()}={name}({addr})" if addr and "(" not in value else line
        elif sep and k == "authinfo":
            continue  # replaced below
        elif sep and k == "nodename":
            line = _with_node_addresses(line, addresses)
        out.append(line)
    out.append("# opsctl lab connect: authenticate through the host's lab munged")
    out.append(f"AuthInfo=socket={munge_socket}")
    return "\n".join(out) + "\n"


def _with_node_addresses(line: str, addresses: dict[str, str]) -> str:
    """A `NodeName=` line with `NodeAddr=` in the order of its names, when every name has a lab
    address and the line names none itself; otherwise the line unchanged."""
    words = line.split()
    if not words or any(w.lower().startswith("nodeaddr=") for w in words):
        return line
    expr = words[0].partition("=")[2]
    try:
        names = parse_nodeset(expr)
    except UsageError:
        return line  # DEFAULT or something this rewrite does not understand: Slurm's own reading
    if not names or any(n not in addresses for n in names):
        return line
    return f"{line} NodeAddr={','.join(addresses[n] for n in names)}"


def _fetch(cfg: LabConfig, path: str) -> bytes | None:
    head = cfg.head
    proc = subprocess.run(ssh_argv(cfg, head, ["cat", path]), capture_output=True, timeout=30, check=False)
    if proc.returncode == 255:
        raise Unreachable(
            f"cannot reach the lab head {head.address} over SSH: {proc.stderr.decode().strip()}"
        )
    return proc.stdout if proc.returncode == 0 else None


def lab_hw_expected(group_vars: Path = LAB_GPU_GROUP_VARS) -> dict[str, Any]:
    """The lab inventory's ``hw_expected``: what `opsctl preflight` must find on a healthy lab."""
    data = yaml.safe_load(group_vars.read_text())
    expected = data.get("hw_expected") if isinstance(data, dict) else None
    if not isinstance(expected, dict):
        raise ValueError(f"{group_vars}: no hw_expected mapping")
    return expected


def known_hosts_text(cfg: LabConfig) -> str:
    """The GPU machines' host keys, read from their files on the host (the machine's own upper
    dir, else the base image they all boot), so preflight verifies keys it never learnt over the
    network. A machine whose key cannot be found is left out and will be refused."""
    from opsctl.lab.image import image_dir

    lines = []
    for m in cfg.gpu_machines:
        for candidate in (cfg.upper_dir(m.name) / HOST_KEY, image_dir(cfg) / "rootfs" / HOST_KEY):
            if candidate.is_file():
                kind, key = candidate.read_text().split()[:2]
                lines.append(f"{m.address} {kind} {key}\n")
                break
    return "".join(lines)


def ssh_toml_lines(cfg: LabConfig) -> list[str]:
    """``[health]`` keys that let the SSH-based commands (`health --source ssh|dcgm`, `preflight`)
    reach the GPU machines from the host: their addresses (the host does not resolve their names)
    and the simulated InfiniBand tree's place inside them."""
    addresses = ", ".join(f"{json.dumps(m.name)} = {json.dumps(m.address)}" for m in cfg.gpu_machines)
    return [
        f"ssh_addresses = {{ {addresses} }}",
        f"ib_sysfs_root = {json.dumps(f'{labsim.STATE_MOUNT}/{labsim.SYSFS_SUBDIR}')}",
    ]


def preflight_toml(cfg: LabConfig, expected: dict[str, Any]) -> str:
    """``[preflight]`` for the lab: its inventory's hw_expected and its GPU machines."""
    from opsctl.nodeset import fold

    lines = ["[preflight]"]
    for key in (
        "gpu_count",
        "gpu_model_substring",
        "gpu_memory_mib_min",
        "ib_hcas",
        "ib_rate_gbps",
        "nvme_data_min",
    ):
        if key in expected:
            lines.append(f"{key} = {json.dumps(expected[key])}")
    lines.append(f"nodes = {json.dumps(fold([m.name for m in cfg.gpu_machines]))}")
    return "\n".join(lines) + "\n"


def launch_toml(cfg: LabConfig) -> str:
    """``[launch]`` for the lab: runs live on the NFS stand-in, which the machines mount at /shared
    and this host reads at its backing directory; the job runs the training runtime that site.yml
    built there (roles/training_runtime), one CPU rank per node, and reads the simulated HCAs."""
    share = cfg.shared_dir / "nfs"
    in_machines = machines.SHARED_MOUNTS["nfs"]
    lines = [
        "[launch]",
        f"runs_dir = {json.dumps(str(share / RUNS_IN_SHARE))}",
        f"cluster_runs_dir = {json.dumps(f'{in_machines}/{RUNS_IN_SHARE}')}",
        f"quarantine_file = {json.dumps(str(cfg.state_dir / 'quarantine.json'))}",
        f"python = {json.dumps(f'{in_machines}/{RUNTIME_PYTHON_IN_SHARE}')}",
        "nodes = 2",
        "inference_nodes = 1",
        "tasks_per_node = 1",
        'time_limit = "60:00"',
        f"ib_sysfs = {json.dumps(f'{labsim.STATE_MOUNT}/{labsim.SYSFS_SUBDIR}')}",
    ]
    return "\n".join(lines) + "\n"


def _munged_alive(cfg: LabConfig) -> bool:
    try:
        pid = int(munge_pidfile(cfg).read_text().strip())
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has let go of everything


def connect(cfg: LabConfig) -> Connection:
    base = host_dir(cfg)
    slurm_dir, munge_dir = base / "slurm", base / "munge"
    slurm_dir.mkdir(parents=True, exist_ok=True)
    munge_dir.mkdir(parents=True, exist_ok=True)
    munge_dir.chmod(0o700)
    conf = _fetch(cfg, f"{SLURM_DIR_IN_NODE}/slurm.conf")
    key = _fetch(cfg, "/etc/munge/munge.key")
    if conf is None or key is None:
        raise Unreachable("the lab head has no slurm.conf or munge key yet: converge it with site.yml first")
    socket = munge_socket_dir(cfg) / "munge.socket"
    addresses = {m.name: m.address for m in cfg.machines}
    (slurm_dir / "slurm.conf").write_text(rewrite_slurm_conf(conf.decode(), addresses, socket))
    for name in SLURM_FILES[1:]:
        extra = _fetch(cfg, f"{SLURM_DIR_IN_NODE}/{name}")
        if extra is not None:
            (slurm_dir / name).write_bytes(extra)
    key_file = munge_dir / "munge.key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    stop_munged(cfg)  # the key may have changed since an earlier connect
    socket.parent.mkdir(mode=0o755, exist_ok=True)
    socket.parent.chmod(0o755)
    run(
        [
            "munged",
            f"--socket={socket}",
            f"--key-file={key_file}",
            f"--pid-file={munge_pidfile(cfg)}",
            f"--log-file={munge_dir / 'munged.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
        ]
    )
    url = f"http://{cfg.head.address}:{PROMETHEUS_PORT}"
    known_hosts = cfg.state_dir / "known_hosts"
    known_hosts.write_text(known_hosts_text(cfg))
    toml = cfg.state_dir / "opsctl.toml"
    toml.write_text(
        "# Written by `opsctl lab connect`: the host's opsctl against the lab's Slurm and Prometheus.\n"
        "[slurm]\n"
        'backend = "cli"\n'
        f'slurm_conf = "{slurm_dir / "slurm.conf"}"\n'
        "\n[prometheus]\n"
        f'url = "{url}"\n'
        "\n[audit]\n"
        f'log = "{cfg.state_dir / "audit.jsonl"}"\n'
        # The health policy's memory (its own drains for the brake, clean streaks) belongs to this
        # lab: kept in its state dir, it goes with `lab down` and never leaks into another cluster.
        "\n[health]\n"
        f'state_file = "{cfg.state_dir / "health-state.json"}"\n'
        f'decision_log = "{cfg.state_dir / "health-decisions.jsonl"}"\n'
        # `opsctl preflight` and `health --source ssh` reach the machines with the lab's key
        f'ssh_key = "{cfg.ssh_key}"\n'
        f'ssh_known_hosts = "{known_hosts}"\n'
        + "".join(line + "\n" for line in ssh_toml_lines(cfg))
        + "\n" + preflight_toml(cfg, lab_hw_expected())
        + "\n" + launch_toml(cfg)
    )
    return Connection(toml, slurm_dir / "slurm.conf", socket, url)


def stop_munged(cfg: LabConfig) -> bool:
    if not _munged_alive(cfg):
        shutil.rmtree(munge_socket_dir(cfg), ignore_errors=True)
        return False
    pid = int(munge_pidfile(cfg).read_text().strip())
    os.kill(pid, signal.SIGTERM)
    # Wait for it to release its socket, so that a new munged can bind it right away.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _munged_alive(cfg):
        time.sleep(0.1)
    shutil.rmtree(munge_socket_dir(cfg), ignore_errors=True)
    return True


def slurmd_action(cfg: LabConfig, node: str, action: str) -> None:
    """Start or stop slurmd on a lab machine over SSH (the slurmd_stopped fault and its heal)."""
    machine = cfg.machine(node)
    if action not in ("start", "stop"):
        raise ValueError(action)
    ssh(cfg, machine, ["systemctl", action, "slurmd"], timeout=60)
