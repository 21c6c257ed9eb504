"""Environment settings reaching rollouts: stop strings, BOS-less tokenizers, truncation masking."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast

from training.config import config_from_dict
from training.envs import Environment, Parser, Rubric, Task, load_environment, prompt_ids
from training.envs.base import exact_answer
from training.inference.client import OpenAICompatClient
from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.metrics import Metrics
from training.model import load_model
from training.orchestrator.__main__ import Orchestrator
from training.orchestrator.batch import to_samples
from training.rundir import RunDir
from training.sft import demo_batch
from training.tokenizer import load_tokenizer


def test_prompt_ids_prepend_bos_only_when_there_is_one(
    tiny_model_dir: Path, no_bos_tokenizer: PreTrainedTokenizerFast
) -> None:
    with_bos = load_tokenizer(tiny_model_dir)
    text = no_bos_tokenizer.encode("12+3=", add_special_tokens=False)
    assert prompt_ids(with_bos, "12+3=") == [with_bos.bos_token_id, *text]
    assert prompt_ids(no_bos_tokenizer, "12+3=") == text


def test_sft_demonstrations_without_bos(no_bos_tokenizer: PreTrainedTokenizerFast) -> None:
    env = load_environment("arithmetic", num_train=10, num_eval=5)
    tasks = list(env.dataset[:3])
    ids, attn, loss_mask = demo_batch(env, no_bos_tokenizer, tasks, "cpu")
    for row, t in enumerate(tasks):
        n = int(attn[row].sum())
        assert no_bos_tokenizer.decode(ids[row, :n].tolist()) == t.prompt + t.answer + "\n"
        # The loss covers exactly the answer and its end marker.
        masked = ids[row][loss_mask[row].bool()].tolist()
        assert no_bos_tokenizer.decode(masked) == t.answer + "\n"


def test_orchestrator_sends_env_stops_and_marks_truncated_rollouts(
    tiny_model_dir: Path, no_bos_tokenizer: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    tok = no_bos_tokenizer
    eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 16)
    srv = InferenceServer(eng, tok, "tiny", "127.0.0.1", 0)
    srv.start()
    try:
        client = OpenAICompatClient(f"http://127.0.0.1:{srv.port}")
        prompts = ["12+3=", "4+5=", "77+1=", "9+9="]
        free = [c[0].text for c in client.complete([prompt_ids(tok, p) for p in prompts], 1, 8, 0.0)]
        # A stop character the greedy model emits for some prompts and not (within 8 tokens) for all.
        stop = next(ch for ch in free[0] if not all(ch in f for f in free))
        env = Environment(
            "probe",
            [Task(f"t{i}", p, "0") for i, p in enumerate(prompts)],
            [],
            Rubric([exact_answer], [1.0]),
            Parser(stop=stop),
            stop_sequences=(stop,),
        )
        cfg = config_from_dict({"inference": {"max_tokens": 8, "stop": ["@@", stop]}})
        run = RunDir(tmp_path)
        orch = Orchestrator(run, cfg, [client], env, tok, Metrics(run, "orchestrator", port=None))
        assert orch.stop_strings == [stop, "@@"]  # the environment's first, then inference.stop's
        try:
            results = orch.generate(list(range(len(prompts))), n=2, temperature=0.0, seed=1)
            groups = [orch.score(i, comps, 0) for i, comps in results]
        finally:
            orch.pool.shutdown()
    finally:
        srv.shutdown()
    for g, text in zip(groups, free, strict=True):
        for r in g.rollouts:
            assert r.prompt == tok.encode(prompts[g.task_index], add_special_tokens=False)  # no None BOS
            out = tok.decode(r.completion, skip_special_tokens=True)
            assert r.truncated == (stop not in text)
            assert out == (text if r.truncated else text[: text.index(stop) + 1])
    assert {r.truncated for g in groups for r in g.rollouts} == {True, False}
    masked = to_samples(groups, mask_truncated=True)
    for s, r in zip(masked, [r for g in groups for r in g.rollouts], strict=True):
        assert sum(s.loss_mask) == (0 if r.truncated else len(r.completion))
    assert all(sum(s.loss_mask) > 0 for s in to_samples(groups, mask_truncated=False))
