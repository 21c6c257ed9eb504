"""Published weights as model directories (training/weights.py): the names are the release's (checked
against transformers' own save_pretrained and GLM-4.5-Air's published names), the directory loads
with from_pretrained, and the built-in server's reader gets the trainer's tensors back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from training.config import ModelConfig
from training.fsutil import STABLE, publish_dir
from training.model import create_tiny_model, load_model
from training.weights import (
    INDEX,
    PerExpertLayout,
    TensorSpec,
    WeightsError,
    deal,
    iter_checkpoint_tensors,
    layout_for,
    load_trainer_state,
    publish_sharded,
    weight_files,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "real-world"
AIR_NAMES = FIXTURES / "glm-4.5-air.index-weight-map.layers-0-1.gptqmodel-issue2114.excerpt.txt"


def publish(final: Path, sd: dict[str, torch.Tensor], model_dir: Path) -> Path:
    publish_sharded(final, sd, model_dir, {"version": 1},
                    lambda f, marker, info, fill: publish_dir(f, fill, marker, info))
    return final


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    path = create_tiny_model(ModelConfig(arch="glm4_moe"), tmp_path_factory.mktemp("moe"), seed=1)
    return path, load_model(path)


def file_tensors(files: list[Path]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            out.update({k: fh.get_tensor(k) for k in fh.keys()})  # noqa: SIM118
    return out


def test_moe_names_and_tensors_equal_transformers_save_pretrained(
    moe: tuple[Path, Any], tmp_path: Path
) -> None:
    model_dir, model = moe
    model.save_pretrained(tmp_path / "upstream")  # transformers' own writer: split per expert
    ours = publish(tmp_path / "step_1", model.state_dict(), model_dir)
    want = file_tensors(weight_files(tmp_path / "upstream"))
    got = file_tensors(weight_files(ours))
    assert set(got) == set(want) and "model.layers.1.mlp.experts.3.up_proj.weight" in got
    for name, t in want.items():
        assert torch.equal(got[name], t), name
    index = json.loads((ours / INDEX).read_text())
    assert set(index["weight_map"]) == set(got)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in got.values())
    assert all((ours / f).is_file() for f in (STABLE, "config.json", "tokenizer.json"))


def test_the_published_directory_loads_with_from_pretrained_and_back_into_the_trainer(
    moe: tuple[Path, Any], tmp_path: Path
) -> None:
    model_dir, model = moe
    ours = publish(tmp_path / "step_1", model.state_dict(), model_dir)
    loaded = AutoModelForCausalLM.from_pretrained(str(ours), dtype=torch.float32).state_dict()
    trainer = load_trainer_state(ours)  # the built-in server's reader: fused experts again
    for name, t in model.state_dict().items():
        assert torch.equal(loaded[name], t), name
        assert torch.equal(trainer[name], t), name
    assert set(trainer) == set(model.state_dict())


def pattern(name: str) -> str:
    name = re.sub(r"^model\.layers\.\d+\.", "model.layers.L.", name)
    return re.sub(r"\.experts\.\d+\.", ".experts.E.", name)


def test_moe_name_patterns_equal_glm_4_5_air_published_names(moe: tuple[Path, Any], tmp_path: Path) -> None:
    """Layer 0 (dense) and layer 1 (the first MoE layer) of the release's index, quoted in a public
    issue (SOURCES.md); layer and expert indices abstracted, per layer kind."""
    model_dir, model = moe
    names = {n for n, _ in iter_checkpoint_tensors(publish(tmp_path / "s", model.state_dict(), model_dir))}
    air = {m[1] for m in re.finditer(r'"([^"]+)":', AIR_NAMES.read_text())}
    for layer in ("model.layers.0.", "model.layers.1."):
        ours = {pattern(n) for n in names if n.startswith(layer)}
        assert ours == {pattern(n) for n in air if n.startswith(layer)}, layer
    outside = {n for n in names if not n.startswith("model.layers.")}
    assert outside - {"model.norm.weight"} == {n for n in air if not n.startswith("model.layers.")}


def test_a_dense_model_keeps_its_names_in_one_shard_per_writer(tmp_path: Path) -> None:
    model_dir = create_tiny_model(ModelConfig(), tmp_path / "dense", seed=0)
    sd = load_model(model_dir).state_dict()
    ours = publish(tmp_path / "step_1", sd, model_dir)
    assert [f.name for f in weight_files(ours)] == ["model-00001-of-00001.safetensors"]
    assert load_trainer_state(ours).keys() == sd.keys()


def test_deal_balances_bytes_and_every_rank_computes_the_same_plan() -> None:
    sizes = [900, 500, 400, 300, 300, 100, 10]
    specs = [TensorSpec(f"t{i}", (n,), torch.float32) for i, n in enumerate(sizes)]
    owners = deal(specs, 3)
    assert owners == deal(specs, 3)
    load = [sum(s.nbytes for s, o in zip(specs, owners, strict=True) if o == r) for r in range(3)]
    assert max(load) - min(load) <= max(s.nbytes for s in specs)
    assert set(deal(specs[:2], 4)) == {0, 1}  # more ranks than tensors: the rest write no file


def test_split_and_fuse_are_inverse() -> None:
    layout = PerExpertLayout()
    gate_up, down = torch.randn(3, 8, 5), torch.randn(3, 5, 4)
    pieces = dict(layout.split("model.layers.2.mlp.experts.gate_up_proj", gate_up)
                  + layout.split("model.layers.2.mlp.experts.down_proj", down))
    assert len(pieces) == 9 and pieces["model.layers.2.mlp.experts.1.up_proj.weight"].shape == (4, 5)
    back = layout.fuse(pieces)
    assert torch.equal(back["model.layers.2.mlp.experts.gate_up_proj"], gate_up)
    assert torch.equal(back["model.layers.2.mlp.experts.down_proj"], down)
    del pieces["model.layers.2.mlp.experts.2.down_proj.weight"]
    with pytest.raises(WeightsError, match="incomplete"):
        layout.fuse(pieces)


def test_fused_experts_of_a_model_type_without_a_layout_are_refused() -> None:
    with pytest.raises(WeightsError, match="no checkpoint layout"):
        layout_for("mixtral", ["model.layers.1.mlp.experts.gate_up_proj"])


def test_a_directory_missing_a_shard_is_not_a_weight_directory(
    moe: tuple[Path, Any], tmp_path: Path
) -> None:
    model_dir, model = moe
    ours = publish(tmp_path / "step_1", model.state_dict(), model_dir)
    weight_files(ours)[0].unlink()
    with pytest.raises(WeightsError, match="missing shards"):
        weight_files(ours)


def test_the_trainer_reads_a_per_expert_checkpoint_row_by_row_without_a_full_load(
    moe: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base model (and SFT output) name experts one by one; the trainer's fused parameters are
    filled from those pieces (each FSDP rank its rows), not by rank 0 loading the whole model."""
    from training.trainer import checkpoint

    model_dir, model = moe
    monkeypatch.setattr(checkpoint, "_load_converted",
                        lambda *a: pytest.fail("fell back to one full load on rank 0"))
    fresh = checkpoint.build_model(model_dir, "float32", torch.device("cpu"), fsdp=False)
    checkpoint.load_initial_weights(fresh, model_dir, "float32")
    got = fresh.state_dict()
    for name, t in model.state_dict().items():
        assert torch.equal(got[name], t), name


def test_a_bfloat16_publication_keeps_the_router_in_float32_as_transformers_does(
    moe: tuple[Path, Any], tmp_path: Path
) -> None:
    model_dir, model = moe
    sd = model.state_dict()
    publish_sharded(tmp_path / "step_1", sd, model_dir, {"version": 1},
                    lambda f, marker, info, fill: publish_dir(f, fill, marker, info), torch.bfloat16)
    got = dict(iter_checkpoint_tensors(tmp_path / "step_1"))
    kept = {n for n, t in got.items() if t.dtype == torch.float32}
    assert kept == {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias"}
    assert {t.dtype for n, t in got.items() if n not in kept} == {torch.bfloat16}
    served = AutoModelForCausalLM.from_pretrained(str(tmp_path / "step_1"), dtype=torch.bfloat16).state_dict()
    assert torch.equal(served["model.layers.1.mlp.gate.weight"], sd["model.layers.1.mlp.gate.weight"])
