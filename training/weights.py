"""Published policy weights: a Hugging Face model directory per version, written in parallel.

`weights/step_N/` is what `AutoModelForCausalLM.from_pretrained` and vLLM's loaders read:
`config.json`, the tokenizer files, `model-0000k-of-0000n.safetensors` shards and
`model.safetensors.index.json`, then `STABLE`. Tensor names are those of the model's published
checkpoints, not the trainer's: transformers 5 fuses a MoE layer's routed experts into two 3-D
parameters (`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]), while
GLM-4.5-Air's release, and vLLM's loader for it, name every expert
(`mlp.experts.<i>.{gate,up,down}_proj.weight`). `LAYOUTS` holds one adapter per model type; the
same adapter converts back (`fuse`) for the built-in inference server, which loads state dicts.

Writing (`publish_sharded`, collective under FSDP): tensors are dealt to ranks by size (largest
first to the rank with the fewest bytes), each rank writes one shard file of the tensors it owns,
and a sharded tensor is gathered to its owner only (`dist.gather` of the FSDP rows), so every byte
crosses the network once and no rank holds more than one full tensor beyond its own shards. Rank 0
adds the index, config and tokenizer; the directory is renamed into place and marked as before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Files of a model directory copied beside the weights (whichever the base model has).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt")


class WeightsError(ValueError):
    """A weight directory that is not a committed model directory, or tensors that do not fit."""


# -- names: one adapter per model type -------------------------------------------------------------
class Layout:
    """A model type whose checkpoint names equal its transformers parameter names."""

    def split(self, name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """The checkpoint tensors for one trainer tensor (views, no copies)."""
        return [(name, tensor)]

    def fuse(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Checkpoint tensors back into the trainer's parameters."""
        return tensors

    def read_rows(
        self, name: str, shape: tuple[int, ...], rows: slice, read: Callable[[str], torch.Tensor]
    ) -> torch.Tensor | None:
        """Rows `rows` of trainer tensor `name` (global `shape`) built from checkpoint tensors that
        `read(checkpoint_name)` returns whole; None when this layout does not build `name`. How a
        rank loads its FSDP rows of a fused tensor the checkpoint stores in pieces."""
        return None


_FUSED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")
_PER_EXPERT = re.compile(
    r"^(?P<prefix>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<kind>gate_proj|up_proj|down_proj)\.weight$"
)


class PerExpertLayout(Layout):
    """Fused experts (transformers 5) <-> one `experts.<i>.{gate,up,down}_proj.weight` per expert:
    gate_up_proj[i] is gate_proj (first half of its rows) over up_proj, down_proj[i] is down_proj."""

    def split(self, name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        m = _FUSED.match(name)
        if m is None:
            return [(name, tensor)]
        prefix, out = m["prefix"], []
        for i in range(tensor.shape[0]):
            if m["kind"] == "down_proj":
                out.append((f"{prefix}.{i}.down_proj.weight", tensor[i]))
            else:
                gate, up = tensor[i].chunk(2, dim=0)
                out += [(f"{prefix}.{i}.gate_proj.weight", gate), (f"{prefix}.{i}.up_proj.weight", up)]
        return out

    def read_rows(
        self, name: str, shape: tuple[int, ...], rows: slice, read: Callable[[str], torch.Tensor]
    ) -> torch.Tensor | None:
        m = _FUSED.match(name)
        if m is None:
            return None
        parts = []
        for i in range(rows.start, rows.stop):  # dim 0 of a fused tensor is the expert
            if m["kind"] == "down_proj":
                parts.append(read(f"{m['prefix']}.{i}.down_proj.weight"))
            else:
                parts.append(torch.cat([read(f"{m['prefix']}.{i}.gate_proj.weight"),
                                        read(f"{m['prefix']}.{i}.up_proj.weight")]))
        return torch.stack(parts) if parts else torch.empty((0, *shape[1:]))

    def fuse(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        experts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
        for name, t in tensors.items():
            m = _PER_EXPERT.match(name)
            if m is None:
                out[name] = t
            else:
                experts.setdefault(m["prefix"], {}).setdefault(int(m["e"]), {})[m["kind"]] = t
        for prefix, by_index in experts.items():
            order = sorted(by_index)
            if order != list(range(len(order))) or any(len(by_index[i]) != 3 for i in order):
                raise WeightsError(f"{prefix}: experts {order} incomplete (need gate, up and down each)")
            out[f"{prefix}.gate_up_proj"] = torch.stack(
                [torch.cat([by_index[i]["gate_proj"], by_index[i]["up_proj"]]) for i in order])
            out[f"{prefix}.down_proj"] = torch.stack([by_index[i]["down_proj"] for i in order])
        return out


# GLM-4.5(-Air)'s release and vLLM's glm4_moe loader name experts one by one. A model type not
# listed keeps its transformers names; a fused expert tensor under it is refused (see layout_for).
LAYOUTS: dict[str, Layout] = {"glm4_moe": PerExpertLayout()}


def layout_for(model_type: str, names: Iterable[str]) -> Layout:
    layout = LAYOUTS.get(model_type, Layout())
    if type(layout) is Layout:
        fused = [n for n in names if _FUSED.match(n)]
        if fused:
            raise WeightsError(f"model type {model_type!r} has fused expert tensors ({fused[0]}) but no "
                               "checkpoint layout in training/weights.py: its release's names are unknown")
    return layout


def keep_fp32(model_type: str) -> tuple[str, ...]:
    """Name parts transformers keeps in float32 whatever the load dtype for this model type (its
    `_keep_in_fp32_modules_strict`: GLM-4.5's router and score-correction bias), so a version
    published in bfloat16 keeps them exact."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cls = getattr(transformers, str(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, "")), None)
    return tuple(getattr(cls, "_keep_in_fp32_modules_strict", None) or ())


def model_type(model_dir: Path) -> str:
    return str(json.loads((model_dir / "config.json").read_text()).get("model_type", ""))


# -- reading -------------------------------------------------------------------------------------
def weight_files(weight_dir: Path) -> list[Path]:
    """The safetensors files of a model directory: the index's shards, or the one file."""
    index = weight_dir / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError) as exc:
            raise WeightsError(f"{index}: not a safetensors index ({exc})") from None
        files = [weight_dir / n for n in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise WeightsError(f"{index} names missing shards: {', '.join(missing[:3])}")
        return files
    if (weight_dir / SINGLE).is_file():
        return [weight_dir / SINGLE]
    raise WeightsError(f"{weight_dir} holds no {INDEX} and no {SINGLE}")


def iter_checkpoint_tensors(weight_dir: Path, device: str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor), one at a time, file by file: what vLLM's `load_weights` takes."""
    from safetensors import safe_open

    for path in weight_files(weight_dir):
        with safe_open(str(path), framework="pt", device=device) as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open handles are not iterable
                yield name, fh.get_tensor(name)


def load_trainer_state(weight_dir: Path) -> dict[str, torch.Tensor]:
    """The whole directory as the trainer's (transformers') parameter names."""
    tensors = dict(iter_checkpoint_tensors(weight_dir))
    kind = model_type(weight_dir) if (weight_dir / "config.json").is_file() else ""
    return LAYOUTS.get(kind, Layout()).fuse(tensors)


# -- writing -------------------------------------------------------------------------------------
_ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


class SafetensorsWriter:
    """A safetensors file written one tensor at a time: the header needs only names, shapes and
    dtypes, so it goes first and each tensor's bytes follow in `specs` order as they arrive."""

    def __init__(self, path: Path, specs: list[TensorSpec], metadata: dict[str, str] | None = None) -> None:
        header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
        offset = 0
        for s in specs:
            header[s.name] = {"dtype": _ST_DTYPES[s.dtype], "shape": list(s.shape),
                              "data_offsets": [offset, offset + s.nbytes]}
            offset += s.nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the format pads the header so tensor data is 8-byte aligned
        self.path, self.specs, self.done = path, specs, 0
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.fh.write(struct.pack("<Q", len(raw)) + raw)

    def write(self, t: torch.Tensor) -> None:
        if self.done >= len(self.specs):
            raise ValueError(f"{self.path}: more tensors than the header lists")
        s = self.specs[self.done]
        if tuple(t.shape) != s.shape or t.dtype != s.dtype:
            raise ValueError(f"{s.name}: got {tuple(t.shape)} {t.dtype}, header says {s.shape} {s.dtype}")
        self.fh.write(t.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
        self.done += 1

    def close(self) -> None:
        """Flush and fsync; raises if fewer tensors came than the header lists."""
        try:
            if self.done != len(self.specs):
                raise ValueError(f"{self.path}: {self.done} of {len(self.specs)} tensors written")
            self.fh.flush()
            os.fsync(self.fh.fileno())
        finally:
            self.fh.close()


def write_safetensors_stream(
    path: Path,
    specs: list[TensorSpec],
    tensors: Iterable[torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> None:
    """`specs`' tensors from `tensors`, in order, into one safetensors file."""
    writer = SafetensorsWriter(path, specs, metadata)
    try:
        for t in tensors:
            writer.write(t)
    except BaseException:
        writer.fh.close()
        raise
    writer.close()


def deal(specs: list[TensorSpec], world: int) -> list[int]:
    """The owning rank of each tensor: largest first to the rank with the fewest bytes so far (ties:
    the lowest rank). Deterministic, so every rank computes the same plan without talking."""
    load = [0] * world
    owner = [0] * len(specs)
    for i in sorted(range(len(specs)), key=lambda i: (-specs[i].nbytes, i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += specs[i].nbytes
    return owner


def checkpoint_specs(layout: Layout, spec: TensorSpec) -> list[TensorSpec]:
    """The checkpoint tensors one trainer tensor becomes, from its shape alone (meta tensors)."""
    meta = torch.empty(spec.shape, dtype=spec.dtype, device="meta")
    return [TensorSpec(n, tuple(t.shape), t.dtype) for n, t in layout.split(spec.name, meta)]


def gather_to(t: torch.Tensor, owner: int) -> torch.Tensor | None:
    """The full value of `t` on `owner` (None elsewhere). A DTensor sharded on dim 0 (FSDP2's
    layout: rank r of the shard group holds rows [r*c, (r+1)*c), c = ceil(rows / group size), the
    last ranks fewer or none) is gathered to the owner alone, from the owner's shard group under
    HSDP; a plain tensor is taken whole."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    if not isinstance(t, DTensor):
        return t if not dist.is_initialized() or dist.get_rank() == owner else None
    rank = dist.get_rank()
    placements = tuple(t.placements)
    if placements == (Shard(0),):
        group = None  # FSDP: every rank holds rows
    elif placements == (Replicate(), Shard(0)):
        # HSDP: each replica group holds every row; only the owner's group takes part
        group = t.device_mesh.get_group("shard")
        if owner not in dist.get_process_group_ranks(group):
            return None
    else:
        full = t.full_tensor()  # any other layout: every rank gathers
        return full if rank == owner else None
    world = dist.get_world_size(group)
    rows = t.shape[0]
    chunk = -(-rows // world)
    local = t.to_local()
    padded = local.new_zeros((chunk, *t.shape[1:]))
    padded[: local.shape[0]] = local
    bufs = [torch.empty_like(padded) for _ in range(world)] if rank == owner else None
    dist.gather(padded, bufs, dst=owner, group=group)
    return torch.cat(bufs)[:rows] if bufs is not None else None


def shard_name(k: int, n: int) -> str:
    return f"model-{k + 1:05d}-of-{n:05d}.safetensors"


def write_shards(tmp: Path, sd: dict[str, torch.Tensor], layout: Layout, rank: int, world: int,
                 dtype: torch.dtype | None = None, writers: int | None = None,
                 fp32: tuple[str, ...] = ()) -> None:
    """Collective: each rank writes the shard file of the tensors it owns into `tmp`, floating point
    ones cast to `dtype` (the serving dtype) when given; rank 0 then writes the index. Every rank
    walks all tensors in the same order (the gathers are collective). `writers` limits the writing
    ranks to the first N (1: rank 0 streams everything, the old way; bench/bench_publish.py)."""

    def out_dtype(name: str, t: torch.Tensor) -> torch.dtype:
        if dtype is None or not t.is_floating_point() or any(part in name for part in fp32):
            return t.dtype
        return dtype

    specs = [TensorSpec(k, tuple(v.shape), out_dtype(k, v)) for k, v in sd.items()]  # DTensor.shape: global
    owners = deal(specs, min(writers or world, world))
    writing = sorted(set(owners))
    files = {r: shard_name(i, len(writing)) for i, r in enumerate(writing)}
    mine = [checkpoint_specs(layout, s) for s, o in zip(specs, owners, strict=True) if o == rank]
    writer = SafetensorsWriter(tmp / files[rank], [c for cs in mine for c in cs], {"format": "pt"}) \
        if rank in files else None
    for (name, t), owner in zip(sd.items(), owners, strict=True):
        full = gather_to(t, owner)
        if full is not None and owner == rank and writer is not None:
            for _, piece in layout.split(name, full.to(out_dtype(name, full))):
                writer.write(piece)
    if writer is not None:
        writer.close()
    if dist.is_initialized():
        dist.barrier()  # every shard is on disk before rank 0 indexes and publishes
    if rank == 0:
        weight_map: dict[str, str] = {}
        total = 0
        for s, o in zip(specs, owners, strict=True):
            for c in checkpoint_specs(layout, s):
                weight_map[c.name] = files[o]
                total += c.nbytes
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")


def copy_model_files(source: Path, dest: Path) -> None:
    """config.json, generation config and tokenizer of the model the run trains, beside the weights."""
    for name in MODEL_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)


def publish_sharded(
    final: Path,
    sd: dict[str, torch.Tensor],
    model_dir: Path,
    info: dict[str, Any],
    publish: Callable[[Path, str, dict[str, Any], Callable[[Path], None]], None],
    dtype: torch.dtype | None = None,
    writers: int | None = None,
) -> None:
    """Write `sd` (the trainer's state dict, DTensors under FSDP) as the model directory `final`,
    floating point tensors in `dtype` when given; `publish` is the collective publish of
    training.trainer.checkpoint (temp dir, rename, marker); `writers` as in write_shards."""
    from training.fsutil import STABLE

    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    kind = model_type(model_dir)
    layout = layout_for(kind, sd)
    fp32 = keep_fp32(kind) if dtype is not None and dtype != torch.float32 else ()

    def fill(tmp: Path) -> None:
        write_shards(tmp, sd, layout, rank, world, dtype, writers, fp32)
        if rank == 0:
            copy_model_files(model_dir, tmp)

    publish(final, STABLE, info, fill)
