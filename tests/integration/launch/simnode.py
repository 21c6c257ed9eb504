"""Simulated node death for the simulated cluster (tests and bench only).

Every simulated node is a slurmd on this host, so stopping a slurmd alone leaves the job's
processes of that node running, which a dead machine would not. `kill_node` stops the node's
slurmd and then kills every process Slurm started for that node: the tasks (their environment
carries SLURMD_NODENAME) and their slurmstepd (whose parent tree leads to nothing else).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from opsctl.sim.cluster import SimCluster


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def node_pids(node: str, slurm_conf: str) -> list[int]:
    """Processes Slurm runs for `node` of the cluster whose slurm.conf is `slurm_conf`: tasks
    (SLURMD_NODENAME) and the slurmstepd above them."""
    tasks = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        env = _environ(int(entry))
        if env.get("SLURMD_NODENAME") == node and env.get("SLURM_CONF") == slurm_conf:
            tasks.append(int(entry))
    pids = set(tasks)
    for pid in tasks:  # walk up to the slurmstepd that owns each task
        parent = _ppid(pid)
        while parent > 1:
            try:
                cmd = Path(f"/proc/{parent}/cmdline").read_bytes()
            except OSError:
                break
            if cmd.startswith(b"slurmstepd"):
                pids.add(parent)
                break
            parent = _ppid(parent)
    return sorted(pids)


def kill_node(sim: SimCluster, node: str) -> list[int]:
    """The node dies: its slurmd stops and everything Slurm ran there is killed."""
    sim.stop_slurmd(node)
    pids = node_pids(node, str(sim.slurm_conf))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
