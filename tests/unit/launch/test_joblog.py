"""Why a job failed, read from its batch log (opsctl.launch.joblog)."""

from __future__ import annotations

from pathlib import Path

from opsctl.launch.joblog import failure_cause, step_creation_failure

# srun's line as Slurm 22.05 writes it into the batch log (src/srun/launch.c), captured on the sim.
LINE = "srun: error: Unable to create step for job {job}: {why}\n"


def write_log(run: Path, job: int, text: str) -> None:
    (run / "logs").mkdir(parents=True, exist_ok=True)
    (run / "logs" / f"slurm-{job}.out").write_text(text)


def test_the_last_reason_for_this_job_is_named(tmp_path: Path) -> None:
    write_log(tmp_path, 7, "2026-12-06T16:00:00Z attempt 0 of job 7 on gpu-[001-003]\n"
              + LINE.format(job=7, why="Requested node configuration is not available")
              + LINE.format(job=9, why="not this job's")  # another job's line (a copied log)
              + LINE.format(job=7, why="More processors requested than permitted"))
    assert step_creation_failure(tmp_path, 7) == "More processors requested than permitted"
    assert failure_cause(tmp_path, 7).startswith(
        "srun could not create a job step: More processors requested than permitted (logs/slurm-7.out;")


def test_no_such_line_or_no_log_names_nothing(tmp_path: Path) -> None:
    write_log(tmp_path, 3, "srun: error: gpu-002: task 0: Exited with exit code 1\n")
    assert failure_cause(tmp_path, 3) == ""
    assert failure_cause(tmp_path, 4) == ""  # no log at all: the state stays Slurm's, no cause added
