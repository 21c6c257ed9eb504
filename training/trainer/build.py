"""What every sharded training process sets up the same way (the RL trainer, chat SFT): the rank's
device and process group, the model built and sharded by the trainer.* layout, AdamW and its
learning-rate schedule."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from training.common import lr_factor
from training.config import JobConfig
from training.metrics import Metrics
from training.trainer import checkpoint


def dist_env() -> tuple[int, int]:
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    return rank, world


@dataclass
class Placement:
    rank: int
    world: int
    cuda: bool
    device: torch.device
    fsdp: bool


def place(cfg: JobConfig, rank: int, world: int, fsdp: bool | None = None) -> Placement:
    """This rank's device, and the process group joined when world > 1. `fsdp` None follows
    trainer.fsdp ("auto": sharded on GPU with world > 1)."""
    tc = cfg.trainer
    cuda = torch.cuda.is_available() and tc.backend != "gloo"
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        # Before the process group: NCCL binds each rank's communicator to the current device,
        # and without this every rank of a node would guess from its global rank.
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                device_id=device if cuda else None)
    if fsdp is None:
        fsdp = tc.fsdp == "on" or (tc.fsdp == "auto" and cuda)
    return Placement(rank, world, cuda, device, fsdp and world > 1)


def build(cfg: JobConfig, initial: Path, where: Placement) -> Any:
    """The model at `initial` built on the meta device and sharded; weights still to be loaded."""
    tc = cfg.trainer
    ac = tc.activation_checkpointing == "on" or (tc.activation_checkpointing == "auto" and where.cuda)
    # Master weights, gradients and optimizer state in trainer.master_dtype; under FSDP the layers
    # compute in trainer.compute_dtype ("auto": the serving dtype, model.dtype).
    compute = cfg.model.dtype if tc.compute_dtype == "auto" else tc.compute_dtype
    return checkpoint.build_model(initial, tc.master_dtype, where.device, where.fsdp, ac, compute,
                                  tc.shard_gpus, tc.attention)


def optimizer(model: Any, cfg: JobConfig, *, lr: float, weight_decay: float, warmup: int, total: int,
              schedule: str, floor: float = 0.0) -> tuple[torch.optim.Optimizer, Any]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(cfg.trainer.betas[0], cfg.trainer.betas[1]),
                            weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup=warmup, total=total, schedule=schedule, floor=floor)
    )
    return opt, sched


def finish(world: int, metrics: Metrics | None) -> NoReturn:
    """Leave the process group, close the metrics, flush, and exit 0 without running C++ static
    destructors. With gloo, torch's teardown at interpreter exit now and then aborts ("terminate
    called without an active exception", SIGABRT) after every rank's work is done and committed;
    srun reports that as a failed task and `opsctl watch` would treat a finished run as a crash.
    Everything the run keeps (weights, checkpoints, metrics) is written and closed before this."""
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if metrics is not None:
        metrics.close()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
