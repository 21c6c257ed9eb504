"""Single-process pieces of trainer/checkpoint.py: the streamed safetensors writer, meta-device
build + initial load (bitwise equal to transformers' own load), and a DCP checkpoint round trip."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training.config import ModelConfig
from training.fsutil import COMMITTED
from training.model import create_tiny_model, load_model
from training.rundir import RunDir
from training.trainer import checkpoint
from training.weights import TensorSpec, write_safetensors_stream


def test_streamed_safetensors_round_trip(tmp_path: Path) -> None:
    emb = torch.randn(5, 3)
    tensors = {
        "emb": emb,
        "head": emb,  # tied: written twice, like save_file of a clone
        "half": torch.randn(3, 2).to(torch.bfloat16),
        "ids": torch.arange(7),
        "odd": torch.randn(3).to(torch.float16),  # 6 bytes: later offsets are not 8-aligned
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor([True, False]),
    }
    specs = [TensorSpec(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    write_safetensors_stream(tmp_path / "m.safetensors", specs, iter(tensors.values()), {"format": "pt"})
    back = load_file(str(tmp_path / "m.safetensors"))
    assert back.keys() == tensors.keys()
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k


def test_streamed_safetensors_rejects_a_tensor_unlike_its_header(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="w: got"):
        write_safetensors_stream(
            tmp_path / "m.safetensors", [TensorSpec("w", (2, 2), torch.float32)], [torch.zeros(2, 3)]
        )


def _same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("arch", ["qwen3", "glm4_moe"])
def test_meta_build_and_initial_load_equal_from_pretrained(tmp_path: Path, arch: str) -> None:
    """qwen3 takes the sliced safetensors path; glm4_moe's checkpoint names per-expert weights the
    model fuses, so it takes the converting fallback. Buffers (rotary tables) survive to_empty."""
    path = create_tiny_model(ModelConfig(arch=arch), tmp_path / arch, seed=1)
    model = checkpoint.build_model(path, "float32", torch.device("cpu"), fsdp=False)
    assert all(p.device.type == "cpu" for p in model.parameters())
    checkpoint.load_initial_weights(model, path, "float32")
    ref = load_model(path)
    assert _same_state(model.state_dict(), ref.state_dict())
    assert _same_state(dict(model.named_buffers()), dict(ref.named_buffers()))


def _trainer_parts(
    path: Path,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    model = checkpoint.build_model(path, "float32", torch.device("cpu"), fsdp=False)
    checkpoint.load_initial_weights(model, path, "float32")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
    return model, opt, sched


def _step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR
) -> None:
    ids = torch.randint(4, 40, (2, 6))
    loss = model(input_ids=ids, labels=ids).loss  # type: ignore[operator]
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


def test_checkpoint_round_trip_continues_bitwise(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = RunDir(tmp_path / "run")
    torch.manual_seed(0)
    model, opt, sched = _trainer_parts(tiny_model_dir)
    for _ in range(2):
        _step(model, opt, sched)
    checkpoint.save_checkpoint(run, model, opt, sched, step=2)
    path = run.step(run.ckpt("trainer"), 2)
    assert (path / COMMITTED).is_file() and (path / ".metadata").is_file()
    assert not list(run.ckpt("trainer").glob(".tmp-*"))
    rng_py = random.random()
    _step(model, opt, sched)  # the uninterrupted run's third step
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2, sched2 = _trainer_parts(tiny_model_dir)
    torch.manual_seed(123)  # the checkpoint's RNG state must win
    assert checkpoint.load_checkpoint(run, 2, model2, opt2, sched2) == 2
    assert random.random() == rng_py
    assert sched2.last_epoch == 2
    _step(model2, opt2, sched2)
    assert _same_state(model2.state_dict(), expected)


def test_loading_an_uncommitted_checkpoint_fails(tmp_path: Path, tiny_model_dir: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.step(run.ckpt("trainer"), 4).mkdir(parents=True)  # a writer died before the marker
    model, opt, sched = _trainer_parts(tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="no committed trainer checkpoint"):
        checkpoint.load_checkpoint(run, 4, model, opt, sched)
