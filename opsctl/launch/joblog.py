"""What a failed job's own log says about why it failed, for `opsctl watch`.

Today one cause is read: srun could not create a job step. Slurm prints it as
`srun: error: Unable to create step for job <id>: <reason>` (src/srun/launch.c), the reason
being Slurm's errno text, e.g. "More processors requested than permitted". A step that was never
created has no log of its own, so without this the run's only trace is "job N ended FAILED".
"""

from __future__ import annotations

import re
from pathlib import Path

_STEP_FAILED = re.compile(r"srun: error: Unable to create step for job (\d+): (.+)")
# The batch log is appended to across requeues; only its end can explain the latest failure.
_TAIL_BYTES = 256 * 1024


def batch_log(run_dir: Path, job_id: int) -> Path:
    """The job's batch output (the script's `#SBATCH --output=<run dir>/logs/slurm-%j.out`)."""
    return run_dir / "logs" / f"slurm-{job_id}.out"


def step_creation_failure(run_dir: Path, job_id: int) -> str:
    """The last reason srun gave for not creating a step of `job_id`, "" if it gave none (or the
    log cannot be read: the run's state then stays as Slurm reported it, with no cause added)."""
    path = batch_log(run_dir, job_id)
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - _TAIL_BYTES))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    reasons = [m.group(2).strip() for m in _STEP_FAILED.finditer(tail) if int(m.group(1)) == job_id]
    return reasons[-1] if reasons else ""


def failure_cause(run_dir: Path, job_id: int) -> str:
    """One line on why the job failed, from its log; "" when the log names no cause."""
    reason = step_creation_failure(run_dir, job_id)
    if not reason:
        return ""
    return (f"srun could not create a job step: {reason} "
            f"(logs/{batch_log(run_dir, job_id).name}; `opsctl launch rl-run --dry-run` checks "
            "the nodes' CPUs and GPUs against the layout)")
