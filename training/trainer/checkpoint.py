"""Trainer checkpoints and weight publication (extracted from the trainer's main module)."""

from __future__ import annotations

import random
import shutil
from typing import Any

import torch
from safetensors.torch import save_file

from training.config import JobConfig
from training.fsutil import COMMITTED, STABLE, publish_dir, step_dirs
from training.rundir import RunDir


def full_state(model: Any, fsdp: bool) -> dict[str, torch.Tensor]:
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        sd = model.state_dict()
    # Clone: safetensors refuses tensors that share storage (tied embeddings).
    return {
        k: v.detach().to("cpu").contiguous().clone() for k, v in sd.items() if isinstance(v, torch.Tensor)
    }


def optim_state(model: Any, opt: torch.optim.Optimizer, fsdp: bool) -> dict[str, Any]:
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return dict(
            get_optimizer_state_dict(
                model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        )
    return dict(opt.state_dict())


def save_checkpoint(
    run: RunDir, model: Any, opt: torch.optim.Optimizer, sched: Any, step: int, rank: int, fsdp: bool
) -> None:
    model_sd, optim_sd = full_state(model, fsdp), optim_state(model, opt, fsdp)  # collective under FSDP
    if rank != 0:
        return
    state = {
        "step": step,
        "model": model_sd,
        "optimizer": optim_sd,
        "scheduler": sched.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    publish_dir(
        run.step(run.ckpt("trainer"), step),
        lambda tmp: torch.save(state, tmp / "state.pt"),
        COMMITTED,
        {"step": step},
    )
    ckpts = step_dirs(run.ckpt("trainer"), COMMITTED)
    for s in sorted(ckpts)[:-2]:
        shutil.rmtree(ckpts[s], ignore_errors=True)


def load_checkpoint(
    run: RunDir, step: int, model: Any, opt: torch.optim.Optimizer, sched: Any, fsdp: bool
) -> int:
    state = torch.load(run.step(run.ckpt("trainer"), step) / "state.pt", weights_only=False)
    if fsdp:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, state["model"], options=opts)
        set_optimizer_state_dict(model, opt, state["optimizer"], options=opts)
    else:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    return int(state["step"])


def publish_weights(run: RunDir, cfg: JobConfig, model: Any, step: int, rank: int, fsdp: bool) -> None:
    sd = full_state(model, fsdp)
    if rank == 0:
        publish_dir(
            run.step(run.weights, step),
            lambda tmp: save_file(sd, str(tmp / "model.safetensors")),
            STABLE,
            {"version": step},
        )
        prune_weights(run, cfg)


def prune_weights(run: RunDir, cfg: JobConfig) -> None:
    tc = cfg.trainer
    versions = step_dirs(run.weights)
    # Inference may still be loading a version up to async_level + 1 behind the newest.
    keep = set(sorted(versions)[-max(tc.keep_weights, cfg.orchestrator.async_level + 2) :])
    keep |= set(step_dirs(run.ckpt("trainer"), COMMITTED))
    for v, path in versions.items():
        # Versions at checkpoint steps stay: a resumed inference server starts from them.
        if v not in keep and v % tc.checkpoint_every != 0:
            shutil.rmtree(path, ignore_errors=True)
