"""`opsctl runs export`: a run's SFT model and an RL policy version as Hugging Face model
directories, for the dense and the MoE architecture. The exported directory loads with
AutoModelForCausalLM.from_pretrained and, greedy, generates what the run's own engine generates
from the same weights; the MoE's experts carry the per-expert names of GLM-4.5-Air's release."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from training.config import dump_toml, load_config
from training.fsutil import STABLE, publish_dir
from training.inference.engine import Engine
from training.model import create_tiny_model, load_model
from training.rundir import RunDir
from training.tokenizer import load_tokenizer
from training.weights import iter_checkpoint_tensors, load_trainer_state, publish_sharded

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "training" / "configs" / "demo.toml"
PROMPT = "12+34="
STEP = 7


def make_run(root: Path, arch: str) -> RunDir:
    """A run directory as a finished run leaves it: config, a committed SFT model and a committed
    RL version (the SFT weights moved), published as the trainer publishes."""
    run = RunDir(root)
    cfg = load_config(DEMO, [f"model.arch={arch}", "run_id=exp"])
    root.mkdir(parents=True)
    run.config.write_text(dump_toml(cfg))
    create_tiny_model(cfg.model, run.sft_final, seed=3)
    (run.sft_final / STABLE).write_text("{}")
    torch.manual_seed(0)
    trained = {k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
               for k, v in load_model(run.sft_final).state_dict().items()}
    # published as the trainer publishes (training/weights.py): a model directory in release names
    publish_sharded(run.step(run.weights, STEP), trained, run.sft_final, {"version": STEP},
                    lambda final, marker, info, fill: publish_dir(final, fill, marker, info))
    return run


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", "runs", "export", *args], capture_output=True,
                          text=True, timeout=300, check=False, cwd=ROOT)


def engine_tokens(run: RunDir, version: int | None) -> list[int]:
    """Greedy tokens from the run's own inference engine, loaded as the inference server loads."""
    tok = load_tokenizer(run.sft_final)
    engine = Engine(load_model(run.sft_final), tok.pad_token_id, {tok.eos_token_id}, 4)
    try:
        if version is not None:
            engine.update_weights(load_trainer_state(run.step(run.weights, version)), version)
        prompt = tok.encode(PROMPT, add_special_tokens=False)
        (seq,) = engine.submit([prompt], n=1, max_tokens=12, temperature=0.0, seed=0).wait(60)
        return list(seq.tokens)
    finally:
        engine.stop()


def hf_tokens(path: Path) -> list[int]:
    tok = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    prompt = torch.tensor([tok.encode(PROMPT, add_special_tokens=False)])
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=12,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    new = out[0, prompt.shape[1]:].tolist()
    return new[: new.index(tok.eos_token_id) + 1] if tok.eos_token_id in new else new


@pytest.mark.parametrize("arch", ["qwen3", "glm4_moe"])
def test_sft_and_rl_exports_load_and_generate_like_the_run(tmp_path: Path, arch: str) -> None:
    run = make_run(tmp_path / "run", arch)
    rl = export(str(run.root), "--output", str(tmp_path / "rl"), "--step", str(STEP), "--json")
    assert rl.returncode == 0, rl.stderr
    info = json.loads(rl.stdout)
    assert (info["source"], info["step"]) == ("rl", STEP) and info["tensors"] > 0
    assert {"config.json", "model.safetensors.index.json", "tokenizer.json", "opsctl_export.json",
            "model-00001-of-00001.safetensors"} <= set(info["files"])
    assert hf_tokens(tmp_path / "rl") == engine_tokens(run, STEP)

    sft = export(str(run.root), "--output", str(tmp_path / "sft"), "--sft")
    assert sft.returncode == 0, sft.stderr
    assert sft.stdout.startswith("exported the SFT model of ")
    assert hf_tokens(tmp_path / "sft") == engine_tokens(run, None)
    embed = "model.embed_tokens.weight"  # the RL export carries the moved weights, not SFT's
    rl_tensors = dict(iter_checkpoint_tensors(tmp_path / "rl"))
    assert not torch.equal(rl_tensors[embed], dict(iter_checkpoint_tensors(tmp_path / "sft"))[embed])

    names = set(rl_tensors)
    if arch == "glm4_moe":  # fused in the trainer, one by one in the release's names
        assert "model.layers.1.mlp.experts.0.gate_proj.weight" in names
        assert not [n for n in names if n.endswith("experts.gate_up_proj")]


def test_a_missing_step_or_a_used_output_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", "qwen3")
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("x")
    for args, text in (
        (["--output", str(tmp_path / "out"), "--step", "99"],
         f"has no committed RL version 99 (committed: {STEP})"),
        (["--output", str(used)], "exists and is not an empty directory"),
        (["--output", str(tmp_path / "out"), "--sft", "--step", "3"], "--sft and --step"),
    ):
        out = export(str(run.root), *args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("opsctl: error: ") and text in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "out").exists() and sorted(p.name for p in used.iterdir()) == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no half-written directory
