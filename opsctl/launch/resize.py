"""Resuming a run on fewer nodes than it was launched on.

When a node fails and the partition has no spare left, `opsctl watch --remediate` resubmits the
run on the nodes that remain: the inference nodes stay as launched and the trainer gets fewer
nodes (`resubmit_size`). The batch script gives the trainer every node past the inference ones, so
it runs on what Slurm allocated, and each attempt's start sets trainer.world_size in the run's
config to match (`set_trainer_world`); the trainer's sharded checkpoint reshards on load and the
orchestrator deals the redone steps' rollouts over the new number of ranks. The global batch and
the loss normalisation do not depend on the world size, so a shrunk run trains the same steps,
only slower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opsctl.errors import ConfigError


@dataclass(frozen=True)
class Resize:
    nodes: int | None  # sbatch --nodes for the resubmission; None: the script's own (the launch size)
    note: str  # why, for the ledger's remediation record; "" when nothing changes


def resubmit_size(
    launched: int, inference_nodes: int, usable: int, *, shrink: bool, min_trainer_nodes: int
) -> Resize:
    """How many nodes a resubmission asks for, given the nodes still usable in the partition (in
    service, not quarantined, not failed in this run; busy with other jobs counts as usable)."""
    if usable >= launched:
        return Resize(None, "")
    trainer = usable - inference_nodes
    if not shrink:
        return Resize(None, f"waits for nodes: {usable} usable, the run needs {launched} "
                            "([launch] shrink_on_failure = false)")
    if trainer < min_trainer_nodes:
        return Resize(None, f"waits for nodes: {usable} usable, fewer than {inference_nodes} inference + "
                            f"{min_trainer_nodes} trainer ([launch] min_trainer_nodes)")
    return Resize(usable, f"shrunk to {usable} nodes, {trainer} of them trainer (launched with "
                          f"{launched - inference_nodes}): {usable} usable")


def set_trainer_world(run_dir: Path, world: int) -> int:
    """Make the run's config name `world` trainer ranks; returns the world size it named before.
    Called at an attempt's start, when no process of the run is running."""
    from opsctl.launch.local import write_config
    from training.config import ConfigError as JobConfigError
    from training.config import load_config, validate
    from training.rundir import RunDir

    run = RunDir(run_dir)
    path = run.config
    try:
        cfg = load_config(path)
    except (OSError, JobConfigError) as exc:
        raise ConfigError(f"run config {path}: {exc}") from None
    before = int(cfg.trainer.world_size)
    if world < 1:
        raise ConfigError(f"{world} trainer ranks: the job has no node past its inference nodes")
    if before == world:
        return before
    cfg.trainer.world_size = world
    try:
        validate(cfg)
    except JobConfigError as exc:
        raise ConfigError(f"run config at trainer.world_size={world}: {exc}") from None
    write_config(run, cfg)  # atomic: a rename over the old file
    return before
