"""What the batch script runs on the job's first node at the start and end of every attempt.

    python -m opsctl.launch.attempt start RUN_DIR [TRAINER_WORLD]  -> prints "ATTEMPT RESUME_STEP"
    python -m opsctl.launch.attempt end RUN_DIR ATTEMPT EXIT_CODE
    python -m opsctl.launch.attempt hcas [SYSFS]     -> prints NCCL_IB_HCA (mlx5_0:1,...)

An attempt is one start of the batch script: the run's attempts are numbered in order whether
Slurm requeued the job or opsctl resubmitted it as a new job. Job id and nodes come from Slurm's
environment (SLURM_JOB_ID, SLURM_JOB_NODELIST). No torch is imported here.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opsctl.errors import OpsctlError
from opsctl.launch.ledger import Attempt, record_attempt_end, record_attempt_start

INFINIBAND = "InfiniBand"


def next_attempt(run_dir: Path) -> int:
    from opsctl.launch.ledger import read_attempts

    done = read_attempts(run_dir)
    return max(done) + 1 if done else 0


def start(run_dir: Path, trainer_world: int | None = None) -> tuple[int, int]:
    """Clean up what a killed attempt left and pick the resume step. Always, also when no
    checkpoint exists yet: an attempt killed before its first one leaves committed rollouts and
    weights that a fresh start at step 0 would collide with. `trainer_world` (the ranks the batch
    script starts on the nodes Slurm gave it) goes into the run's config first: fewer than at
    launch when the run was resubmitted on the nodes left after a failure (opsctl.launch.resize)."""
    from opsctl.launch.resize import set_trainer_world
    from opsctl.nodeset import expand
    from training.rundir import RunDir, resume_point

    run = RunDir(run_dir)
    if trainer_world is not None:
        set_trainer_world(run_dir, trainer_world)
    # (a run directory without its config is not one to start)
    world = int(run.load_config().trainer.world_size)
    step = resume_point(run)
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    number = next_attempt(run_dir)
    record_attempt_start(
        run_dir,
        Attempt(
            attempt=number,
            job_id=int(os.environ.get("SLURM_JOB_ID") or 0),
            nodes=expand(nodelist) if nodelist else [],
            resume_step=step,
            start=round(time.time(), 3),
            trainer_world_size=world,
        ),
    )
    return number, step


def read_sysfs(root: Path) -> dict[str, str]:
    """The files the HCA choice needs: <dev>/ports/<n>/{state,link_layer}."""
    files: dict[str, str] = {}
    if not root.is_dir():
        return files
    for dev in sorted(root.iterdir()):
        ports = dev / "ports"
        if not ports.is_dir():
            continue
        for port in sorted(ports.iterdir()):
            for leaf in ("state", "link_layer"):
                path = port / leaf
                if path.is_file():
                    files[f"{dev.name}/ports/{port.name}/{leaf}"] = path.read_text(errors="replace")
    return files


def compute_hcas(files: dict[str, str]) -> list[str]:
    """Active InfiniBand ports as NCCL_IB_HCA entries; RoCE/Ethernet ports (storage) are left out."""
    from opsctl.parsers.ib_sysfs import parse_ib_sysfs

    out = []
    for dev in parse_ib_sysfs(files):
        for port in dev.ports:
            if port.state == "ACTIVE" and port.link_layer in ("", INFINIBAND):
                out.append(f"{dev.name}:{port.number}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["start"] and len(args) in (2, 3):
        if len(args) == 3 and not args[2].isdigit():
            print(f"opsctl.launch.attempt start: TRAINER_WORLD {args[2]!r} is not a number", file=sys.stderr)
            return 2
        try:
            number, step = start(Path(args[1]), int(args[2]) if len(args) == 3 else None)
        except OpsctlError as exc:
            print(f"opsctl.launch.attempt start: {exc}", file=sys.stderr)
            return exc.exit_code
        print(number, step)
        return 0
    if args[:1] == ["end"] and len(args) == 4:
        record_attempt_end(Path(args[1]), int(args[2]), int(args[3]))
        return 0
    if args[:1] == ["hcas"] and len(args) <= 2:
        root = Path(args[1] if len(args) == 2 else "/sys/class/infiniband")
        print(",".join(compute_hcas(read_sysfs(root))))
        return 0
    print("usage: python -m opsctl.launch.attempt start RUN_DIR [TRAINER_WORLD] | end RUN_DIR N CODE "
          "| hcas [SYSFS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
