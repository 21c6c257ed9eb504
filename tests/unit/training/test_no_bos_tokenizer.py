"""A tokenizer without a BOS token (as Qwen's): SFT and the orchestrator's prompts work with it."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from training.config import JobConfig, ModelConfig
from training.envs import load_environment
from training.inference.__main__ import build_engine
from training.inference.client import OpenAICompatClient
from training.inference.server import InferenceServer
from training.metrics import Metrics
from training.model import CHARS, load_model, load_tokenizer, tiny_config
from training.orchestrator.__main__ import Orchestrator
from training.rundir import RunDir
from training.sft import run_sft


def qwen_like_model(out: Path) -> Path:
    """Qwen's special-token layout: <|endoftext|> pads, <|im_end|> ends, no BOS at all."""
    vocab = {t: i for i, t in enumerate(["<|endoftext|>", "<|im_end|>", *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    assert hf.bos_token_id is None
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_config(ModelConfig(), len(hf), hf)).save_pretrained(out)
    hf.save_pretrained(out)
    return out


def test_sft_and_rollouts_with_a_tokenizer_without_bos(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = JobConfig()
    cfg.model.path = str(qwen_like_model(tmp_path / "qwen-like"))
    cfg.sft.steps, cfg.sft.num_demos, cfg.sft.batch_size = 3, 8, 4
    cfg.env.kwargs = {"num_train": 20, "num_eval": 4}
    cfg.inference.max_tokens = 4
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    sft = run_sft(run, cfg)  # the demonstrations held None where BOS was
    tok = load_tokenizer(sft)
    srv = InferenceServer(build_engine(load_model(sft), tok, 16, "cpu"), tok, "m", "127.0.0.1", 0)
    srv.start()
    env = load_environment("arithmetic", **cfg.env.kwargs)
    client = OpenAICompatClient(f"http://127.0.0.1:{srv.port}")
    orch = Orchestrator(run, cfg, [client], env, tok, Metrics(run, "orchestrator", None))
    try:
        prompt = orch._prompt_ids(env.dataset[0].prompt)
        assert prompt == tok.encode(env.dataset[0].prompt, add_special_tokens=False)
        groups = [orch.score(i, comps, 0) for i, comps in orch.generate([0, 1], 2, 1.0, seed=1)]
    finally:
        orch.pool.shutdown()
        srv.shutdown()
    assert all(r.prompt == orch._prompt_ids(env.dataset[g.task_index].prompt) and r.completion
               for g in groups for r in g.rollouts)
