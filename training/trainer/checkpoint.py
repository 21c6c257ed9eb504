"""Trainer state on disk: sharded checkpoints, the initial model, and weights for inference.

Checkpoints (`checkpoints/trainer/step_N/`) are torch.distributed.checkpoint (DCP) directories:
every rank writes the shards it owns (`__R_0.distcp`), the coordinator writes `.metadata`, and
rank 0 adds `trainer_state.pt` (step, scheduler, RNG) before the directory is renamed into place
and marked `COMMITTED` (fsutil.publish_dir). DCP records each tensor's global shape, so a load at
another world size (or without FSDP) reads just the slices each rank now owns.

Models are built with their parameters on the meta device, sharded (FSDP2 `fully_shard`) and only
then given memory, so no rank ever holds the full model: a resumed rank loads its shards from the
checkpoint, and at step 0 it reads its rows of the base model's safetensors (memory-mapped).

Weights for inference (`weights/step_N/` + STABLE) are a Hugging Face model directory written by
all ranks in parallel, in the names of the model's published checkpoints (training/weights.py).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors import safe_open
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM

from training.config import JobConfig
from training.fsutil import COMMITTED, publish_dir, step_dirs
from training.model import DTYPES, load_model
from training.rundir import RunDir
from training.varlen import VARLEN
from training.weights import LAYOUTS, Layout, model_type, publish_sharded

TRAINER_STATE = "trainer_state.pt"
KEEP_CHECKPOINTS = 2


# -- building the model ----------------------------------------------------------------------------
@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Register every new parameter on the meta device; buffers (rotary tables) stay real, because
    nothing in a checkpoint restores the non-persistent ones."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def enable_activation_checkpointing(model: Any) -> None:
    """Keep only each decoder layer's input for backward and recompute the layer there (PyTorch's
    non-reentrant checkpoint, which FSDP2 supports: the recompute gathers the layer's shards again)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # a KV cache is meaningless in training and conflicts with it


def build_model(path: Path, dtype: str, device: torch.device, fsdp: bool,
                activation_checkpointing: bool = False, compute_dtype: str | None = None,
                shard_gpus: int = 0, attention: str = "mask") -> Any:
    """The architecture at `path` with uninitialised parameters in `dtype` (the master copy), sharded
    when `fsdp`: weights come from load_initial_weights or load_checkpoint. Under FSDP with another
    `compute_dtype`, each layer's gathered parameters are cast to it for forward and backward, and
    gradients are reduce-scattered in `dtype` (FSDP2's MixedPrecisionPolicy). `shard_gpus` below
    the world size shards within groups of that many ranks and replicates across them (HSDP).
    `attention` "varlen" attends within documents without a mask (training/varlen.py)."""
    with params_on_meta():
        extra = {"attn_implementation": VARLEN} if attention == "varlen" else {}
        model: Any = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(str(path)), dtype=DTYPES[dtype], **extra
        )
    if activation_checkpointing:
        enable_activation_checkpointing(model)
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy()
        if compute_dtype is not None and compute_dtype != dtype:
            policy = MixedPrecisionPolicy(param_dtype=DTYPES[compute_dtype], reduce_dtype=DTYPES[dtype])
        mesh = hsdp_mesh(device, shard_gpus)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    model.to_empty(device=device)  # allocates only this rank's shards; buffers come back below
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
    return model


def hsdp_mesh(device: torch.device, shard_gpus: int) -> Any:
    """A (replicate, shard) device mesh when `shard_gpus` splits the world into groups; else None
    (FSDP's default: one group of every rank)."""
    world = dist.get_world_size()
    if not 0 < shard_gpus < world:
        return None
    if world % shard_gpus:
        raise ValueError(f"trainer.shard_gpus {shard_gpus} does not divide the {world} trainer ranks")
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (world // shard_gpus, shard_gpus),
                            mesh_dim_names=("replicate", "shard"))


def _safetensors_index(path: Path) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            names: list[str] = fh.keys()
            index.update(dict.fromkeys(names, file))
    return index


def _local_slice(t: torch.Tensor) -> tuple[slice, ...]:
    """The global index range of this rank's piece of `t` (everything for a plain tensor)."""
    if not isinstance(t, DTensor):
        return tuple(slice(0, n) for n in t.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    return tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))


def load_initial_weights(model: Any, path: Path, dtype: str) -> None:
    """Fill `model` (built by build_model) from the HF checkpoint at `path`: each rank reads only
    the rows it owns, also of tensors the checkpoint stores in pieces (per-expert MoE weights,
    training/weights.py). A checkpoint the model's layout cannot map falls back to one full load on
    rank 0, broadcast tensor by tensor to the shards."""
    sd = model.state_dict()
    index = _safetensors_index(path)
    kind = model_type(path) if (path / "config.json").is_file() else ""
    layout = LAYOUTS.get(kind, Layout())
    handles: dict[Path, Any] = {}

    def handle(name: str) -> Any:
        if index[name] not in handles:
            handles[index[name]] = safe_open(str(index[name]), framework="pt")
        return handles[index[name]]

    def read(name: str) -> torch.Tensor:
        if name not in index:
            raise KeyError(name)
        return handle(name).get_tensor(name)

    tied = {id(v) for k, v in sd.items() if k in index}  # lm_head = embeddings: loaded by name
    pieces = {k for k, v in sd.items() if k not in index and id(v) not in tied}
    if any(not _maps(layout, k, sd[k], read) for k in pieces):
        handles.clear()
        _load_converted(model, path, dtype)
        return
    try:
        with torch.no_grad():
            for name, t in sd.items():
                local = t.to_local() if isinstance(t, DTensor) else t
                where = _local_slice(t)
                if name in index:
                    local.copy_(handle(name).get_slice(name)[where])
                elif name in pieces:
                    rows = layout.read_rows(name, tuple(t.shape), where[0], read)
                    assert rows is not None  # _maps said so
                    local.copy_(rows)
    finally:
        handles.clear()


def _maps(layout: Layout, name: str, t: torch.Tensor, read: Callable[[str], torch.Tensor]) -> bool:
    """Whether the layout builds this rank's rows of `name` (FSDP shards dim 0 only) from tensors
    the checkpoint holds (tried on one row)."""
    where = _local_slice(t)
    if any(w != slice(0, n) for w, n in zip(where[1:], t.shape[1:], strict=True)):
        return False
    try:
        return layout.read_rows(name, tuple(t.shape), slice(0, min(1, t.shape[0])), read) is not None
    except KeyError:
        return False


def _load_converted(model: Any, path: Path, dtype: str) -> None:
    if not any(isinstance(v, DTensor) for v in model.state_dict().values()):
        model.load_state_dict(load_model(path, dtype, "cpu").state_dict())  # a replica needs it all
        return
    full = load_model(path, dtype, "cpu").state_dict() if dist.get_rank() == 0 else {}
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )


# -- checkpoints ---------------------------------------------------------------------------------
@dataclass
class TrainerState:
    """What a checkpoint holds beyond the DCP shards; RNG is rank 0's (the ranks share a seed)."""

    step: int
    world_size: int
    scheduler: dict[str, Any]
    torch_rng: torch.Tensor
    python_rng: Any


@contextlib.contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns on every call without a process group; world 1 has none by design."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


def _collective_publish(final: Path, marker: str, info: dict[str, Any], fill: Callable[[Path], None]) -> None:
    """publish_dir with every rank writing into the same temp dir: rank 0 creates it and tells the
    others its name; `fill` must be collective (dcp.save ends with a gather on the coordinator, so
    all shards are on disk when it returns on rank 0, which then renames and marks)."""
    if not dist.is_initialized():
        publish_dir(final, fill, marker, info)
        return
    if dist.get_rank() == 0:

        def fill0(tmp: Path) -> None:
            dist.broadcast_object_list([str(tmp)], src=0)
            fill(tmp)

        publish_dir(final, fill0, marker, info)
    else:
        name: list[Any] = [None]
        dist.broadcast_object_list(name, src=0)
        fill(Path(name[0]))
    dist.barrier()  # nobody starts the next step (or a resume) on an unmarked checkpoint


def save_checkpoint(run: RunDir, model: Any, opt: torch.optim.Optimizer, sched: Any, step: int,
                    component: str = "trainer") -> None:
    """Collective: every rank writes its own shards of model and optimizer into
    checkpoints/<component>/step_N (the RL trainer's, or chat SFT's)."""
    model_sd, optim_sd = get_state_dict(model, opt)  # sharded (DTensor) under FSDP: no gather
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    meta = TrainerState(step, world, sched.state_dict(), torch.get_rng_state(), random.getstate())

    def fill(tmp: Path) -> None:
        with _single_process_ok():
            dcp.save(
                {"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp, no_dist=not dist.is_initialized()
            )
        if rank == 0:
            torch.save(meta.__dict__, tmp / TRAINER_STATE)

    final = run.step(run.ckpt(component), step)
    _collective_publish(final, COMMITTED, {"step": step, "world_size": world, "format": "dcp"}, fill)
    if rank == 0:
        ckpts = step_dirs(run.ckpt(component), COMMITTED)
        for s in sorted(ckpts)[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(ckpts[s], ignore_errors=True)


def load_checkpoint(run: RunDir, step: int, model: Any, opt: torch.optim.Optimizer, sched: Any,
                    component: str = "trainer") -> int:
    """Collective: each rank reads the slices of the saved shards that it owns now, whatever the
    world size that wrote them. Returns the checkpoint's step."""
    path = run.step(run.ckpt(component), step)
    if not (path / COMMITTED).is_file():
        raise FileNotFoundError(f"no committed trainer checkpoint at {path}")
    model_sd, optim_sd = get_state_dict(model, opt)  # the target layout (initialises optimizer state)
    # In place, into model_sd/optim_sd; DCP needs no process group for a single process.
    with _single_process_ok():
        dcp.load(
            {"model": model_sd, "optim": optim_sd}, checkpoint_id=path, no_dist=not dist.is_initialized()
        )
    set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd)
    meta = TrainerState(**torch.load(path / TRAINER_STATE, weights_only=True))
    sched.load_state_dict(meta.scheduler)
    torch.set_rng_state(meta.torch_rng)
    random.setstate(meta.python_rng)
    return meta.step


# -- weights for inference -------------------------------------------------------------------------
def publish_weights(run: RunDir, cfg: JobConfig, model: Any, step: int, rank: int) -> None:
    """Collective under FSDP: every rank writes the shard of the tensors it owns (training/weights.py)
    into weights/step_N, a model directory; rank 0 indexes, marks and prunes old versions."""
    publish_model(run.step(run.weights, step), model, run.initial_model(cfg), {"version": step},
                  cfg.model.dtype)
    if rank == 0:
        prune_weights(run, cfg)


def publish_model(final: Path, model: Any, model_dir: Path, info: dict[str, Any], dtype: str) -> None:
    """Collective: `model` as a Hugging Face model directory at `final` (config and tokenizer from
    `model_dir`), each rank writing the shards it owns, marked STABLE once whole."""
    sd = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    publish_sharded(final, sd, model_dir, info, _collective_publish, DTYPES[dtype])


def prune_weights(run: RunDir, cfg: JobConfig) -> None:
    tc = cfg.trainer
    versions = step_dirs(run.weights)
    # Inference may still be loading a version up to async_level + 1 behind the newest.
    keep = set(sorted(versions)[-max(tc.keep_weights, cfg.orchestrator.async_level + 2) :])
    # A resume starts inference from the version of a committed trainer checkpoint (two are kept).
    keep |= set(step_dirs(run.ckpt("trainer"), COMMITTED))
    for v, path in versions.items():
        if v not in keep:
            shutil.rmtree(path, ignore_errors=True)
