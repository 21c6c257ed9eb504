"""What explains a failed integration test, attached to its report: the simulated cluster's daemons
(which are alive, the end of each daemon's log) and the lab's machines (failed units and their
journal). Used by the report hook in tests/integration/conftest.py."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opsctl.sim.cluster import SimCluster

TAIL_LINES = 25
# A Slurm daemon logs to its own file (the slurm role's slurm_log_dir), not to the journal: the
# journal only says that it exited, the file says why.
SLURM_LOGS = {
    "slurmd.service": "/var/log/slurm/slurmd.log",
    "slurmctld.service": "/var/log/slurm/slurmctld.log",
    "slurmdbd.service": "/var/log/slurm/slurmdbd.log",
}


def _tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return [f"(unreadable: {exc})"]
    return text.splitlines()[-lines:]


def sim_report(sim: SimCluster) -> str:
    out = [f"simulated cluster in {sim.state_dir}"]
    try:
        procs = sim.procs.status()
    except OSError as exc:
        procs, out = [], [*out, f"(no process table: {exc})"]
    for p in procs:
        out.append(f"  {p.name}: pid {p.pid} {'alive' if p.alive else 'DEAD'}")
    for log in sorted((sim.state_dir / "log").glob("*.log")):
        lines = _tail(log)
        if lines:
            out.append(f"--- {log.name} (last {len(lines)} lines)")
            out.extend(lines)
    return "\n".join(out)


def slurm_view(lab: Any) -> list[str]:
    """The head's Slurm view of nodes out of service, and what slurmctld logged about each: a node
    left drained or down by an earlier test fails every lab test after it, and only this log says
    which request (drain, reboot, timeout) put it there."""
    head = lab.cfg.head.name
    reasons = lab.ssh(head, "sinfo", "-h", "-N", "-R", "-o", "%N|%T|%H|%E", timeout=30)
    out = [f"Slurm nodes out of service: {reasons.stdout.strip() or reasons.stderr.strip() or 'none'}"]
    for node in sorted({line.split("|", 1)[0] for line in reasons.stdout.splitlines() if "|" in line}):
        log = lab.ssh(head, "grep", "-F", node, SLURM_LOGS["slurmctld.service"], timeout=30)
        out.append(f"--- slurmctld.log on {node}")
        out.extend(log.stdout.splitlines()[-TAIL_LINES:])
    return out


def lab_report(lab: Any) -> str:
    """`lab` is tests/integration/lab/lab_helpers.RunningLab (not imported: its directory is only on
    the path when the lab tests are collected)."""
    out: list[str] = slurm_view(lab)
    for machine in lab.cfg.machines:
        failed = lab.ssh(machine.name, "systemctl", "--failed", "--no-legend", "--plain", timeout=30)
        if failed.returncode == 255:
            out.append(f"{machine.name}: unreachable over SSH: {failed.stderr.strip()[-300:]}")
            continue
        units = [line.split()[0] for line in failed.stdout.splitlines() if line.strip()]
        out.append(f"{machine.name}: failed units: {', '.join(units) or 'none'}")
        for unit in units[:5]:
            journal = lab.ssh(
                machine.name, "journalctl", "-u", unit, "-n", str(TAIL_LINES), "--no-pager", timeout=30
            )
            out.append(f"--- {machine.name} {unit}")
            out.extend(journal.stdout.splitlines()[-TAIL_LINES:])
            if unit in SLURM_LOGS:
                log = lab.ssh(machine.name, "tail", "-n", str(TAIL_LINES), SLURM_LOGS[unit], timeout=30)
                out.append(f"--- {machine.name} {SLURM_LOGS[unit]}")
                out.extend((log.stdout or log.stderr).splitlines())
    return "\n".join(out)


def reports(values: Iterable[Any]) -> list[tuple[str, str]]:
    """(title, text) for each cluster or lab among a test's fixture values."""
    out: list[tuple[str, str]] = []
    seen: set[int] = set()
    expanded: list[Any] = []
    for value in values:  # a factory fixture lists the clusters it started (sim_factory)
        expanded.extend([value, *getattr(value, "started", [])])
    for value in expanded:
        if id(value) in seen:
            continue
        seen.add(id(value))
        try:
            if isinstance(value, SimCluster):
                out.append(("simulated cluster", sim_report(value)))
            elif hasattr(value, "ssh") and hasattr(value, "cfg") and hasattr(value.cfg, "machines"):
                out.append(("lab machines", lab_report(value)))
        except Exception as exc:  # diagnostics must never hide the test's own failure
            out.append(("diagnostics", f"could not collect: {type(exc).__name__}: {exc}"))
    return out
