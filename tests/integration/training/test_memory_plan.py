"""The launch planner (opsctl/launch/plan.py) against what torch measures on CPU: its parameter count
equals transformers' own models (the GLM-4.5-Air config built on the meta device), and its
per-GPU tensor-memory figure is within TOLERANCE of torch's profiler peak over two training steps
(build, load, forward, backward, AdamW) for three tiny configs: dense without and with activation
checkpointing, and the MoE. Measured ratios (plan / profiler): 1.06, 0.92, 1.03."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from opsctl.launch.plan import ModelShape, TrainLayout, memory
from training.config import ModelConfig
from training.model import create_tiny_model
from training.orchestrator.batch import Sample, collate, pack, shard
from training.profiling import peak_tensor_bytes
from training.trainer.checkpoint import build_model, load_initial_weights
from training.trainer.step import accumulate

pytestmark = pytest.mark.integration

TOLERANCE = 0.15
AIR = Path(__file__).resolve().parents[3] / "training" / "configs" / "models" / "glm-4.5-air"
TOKENS, ROW, CHUNK = 4096, 256, 256
DENSE = dict(arch="qwen3", hidden_size=256, num_hidden_layers=4, intermediate_size=1024)
CASES = {  # name: (model fields, activation checkpointing)
    "dense": (DENSE, False),
    "dense-checkpointed": (DENSE, True),
    "moe": (dict(arch="glm4_moe", hidden_size=256, num_hidden_layers=4, intermediate_size=512,
                 moe_intermediate_size=128, n_routed_experts=8, num_experts_per_tok=2), False),
}


def state_numel(model: torch.nn.Module) -> int:
    return sum(t.numel() for t in model.state_dict().values())


def test_the_glm_4_5_air_count_equals_transformers_model() -> None:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(AIR)))
    assert ModelShape.from_hf(json.loads((AIR / "config.json").read_text())).total == state_numel(model)


def micro_batch() -> tuple[list[dict[str, torch.Tensor]], int]:
    rng, samples = random.Random(0), []
    while sum(len(s.input_ids) for s in samples) < TOKENS:
        samples.append(Sample(input_ids=[rng.randrange(4, 40) for _ in range(ROW)],
                              loss_mask=[0] * 4 + [1] * (ROW - 4), logprobs=[0.0] * 4 + [-2.0] * (ROW - 4),
                              advantages=[0.0] * 4 + [1.0] * (ROW - 4)))
    (mbs,) = shard(pack(samples, TOKENS, row_tokens=ROW), 1)
    assert len(mbs) == 1
    return [collate(mb, 0) for mb in mbs], sum(sum(s.loss_mask) for s in samples)


@pytest.mark.parametrize("case", list(CASES))
def test_the_planned_peak_is_within_tolerance_of_the_profiler(tmp_path: Path, case: str) -> None:
    fields, checkpointing = CASES[case]
    model_dir = create_tiny_model(ModelConfig(num_attention_heads=4, num_key_value_heads=2,
                                              head_dim=int(fields["hidden_size"]) // 4, **fields),  # type: ignore[arg-type]
                                  tmp_path / "model", seed=0)
    torch.set_num_threads(2)
    mbs, loss_tokens = micro_batch()

    def two_steps() -> None:  # the second step holds AdamW's moments throughout: steady state
        model = build_model(model_dir, "float32", torch.device("cpu"), fsdp=False,
                            activation_checkpointing=checkpointing)
        load_initial_weights(model, model_dir, "float32")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            accumulate(model, mbs, loss_tokens, world=1, fsdp=False, device=torch.device("cpu"),
                       temperature=1.0, ratio_low=0.1, ratio_high=10.0, chunk_tokens=CHUNK)
            opt.step()

    measured = peak_tensor_bytes(two_steps)
    shape = ModelShape.from_hf(json.loads((model_dir / "config.json").read_text()))
    assert shape.total == state_numel(AutoModelForCausalLM.from_pretrained(str(model_dir)))
    planned = memory(shape, TrainLayout(1, 1, TOKENS, ROW, CHUNK, checkpointing, 4, 4, 4, 1)).peak
    print(f"{case}: planned {planned / 2**20:.1f} MiB, profiler {measured / 2**20:.1f} MiB, "
          f"ratio {planned / measured:.3f}")
    assert abs(planned / measured - 1) <= TOLERANCE
