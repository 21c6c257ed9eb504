"""The orchestrator's generate -> score -> publish path against a real built-in server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from training.config import JobConfig
from training.envs import load_environment
from training.inference.__main__ import build_engine
from training.inference.client import OpenAICompatClient
from training.inference.server import InferenceServer
from training.metrics import Metrics
from training.model import load_model, load_tokenizer
from training.orchestrator.__main__ import Orchestrator
from training.rundir import RunDir


@pytest.fixture
def uniform_server(tiny_model_dir: Path) -> Iterator[InferenceServer]:
    # A zeroed output layer samples every token uniformly (seeded): some completions meet the
    # stop string or EOS within max_tokens, others are cut off.
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    srv = InferenceServer(build_engine(model, tok, 64, "cpu"), tok, "tiny", "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.shutdown()


def orchestrator(tmp: Path, model_dir: Path, port: int) -> Orchestrator:
    cfg = JobConfig()
    cfg.sft.enabled, cfg.model.path = False, str(model_dir)
    cfg.inference.max_tokens = 40
    cfg.orchestrator.group_size = 8
    run = RunDir(tmp)
    env = load_environment("arithmetic", num_train=20, num_eval=4)
    clients = [OpenAICompatClient(f"http://127.0.0.1:{port}")]
    return Orchestrator(run, cfg, clients, env, load_tokenizer(model_dir), Metrics(run, "orchestrator", None))


def test_truncated_completions_carry_no_loss(
    uniform_server: InferenceServer, tiny_model_dir: Path, tmp_path: Path
) -> None:
    orch = orchestrator(tmp_path, tiny_model_dir, uniform_server.port)
    try:
        results = orch.generate([0, 1, 2, 3], 8, 1.0, seed=5)
        groups = [orch.score(i, comps, 0) for i, comps in results]
        loss_tokens = orch.publish(0, groups)
    finally:
        orch.pool.shutdown()
    tok = orch.tok
    newline, eos = tok.convert_tokens_to_ids(["\n", "<eos>"])
    rollouts = [r for g in groups for r in g.rollouts]
    truncated = [r for r in rollouts if r.truncated]
    stopped = [r for r in rollouts if not r.truncated]
    assert truncated and stopped
    # The environment's stop string came with the request: a finished completion ends at its first
    # newline (or EOS), a truncated one is max_tokens long with neither.
    assert all(r.completion[-1] in (newline, eos) and newline not in r.completion[:-1] for r in stopped)
    assert all(len(r.completion) == 40 and not {newline, eos} & set(r.completion) for r in truncated)
    # Published batch: only the stopped completions' tokens are in the loss.
    assert loss_tokens == sum(len(r.completion) for r in stopped)
    batch = torch.load(tmp_path / "rollouts" / "step_0" / "rank_0.pt", weights_only=False)
    assert batch["loss_tokens"] == loss_tokens
    assert sum(float(mb["loss_mask"].sum()) for mb in batch["micro_batches"]) == loss_tokens
