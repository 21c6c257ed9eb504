"""verifiers' own chat client (its classic API, verifiers 0.3.x) against the built-in inference server,
as it runs against vLLM: single-turn and two-turn rollouts come back with the prompt the model's chat
template renders, the sampled token ids and their log-probs, and the trainer reproduces those
log-probs on the samples training/orchestrator/turns.py builds from the rollout's trajectory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model, token_logprobs
from training.orchestrator.turns import merge_turns, turns_from_trajectory
from training.tokenizer import load_tokenizer

vf = pytest.importorskip("verifiers")  # the training extra; the lean install has no verifiers
datasets = pytest.importorskip("datasets")

SAMPLING = {"max_tokens": 6, "temperature": 1.0, "seed": 3, "logprobs": True,
            "extra_body": {"return_token_ids": True}}
ATOL = 1e-5


@pytest.fixture
def server(tiny_model_dir: Path) -> Iterator[InferenceServer]:
    tok = load_tokenizer(tiny_model_dir)
    eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, {tok.eos_token_id}, 16)
    srv = InferenceServer(eng, tok, "tiny")
    srv.start()
    yield srv
    srv.shutdown()


def client(srv: InferenceServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPSCTL_TEST_API_KEY", "local")  # verifiers reads the key from a variable
    url = f"http://127.0.0.1:{srv.port}/v1"
    return vf.ClientConfig(client_type="openai_chat_completions", api_base_url=url,
                           api_key_var="OPSCTL_TEST_API_KEY", max_retries=0)


def has_answer(completion: Any, answer: str, **_: Any) -> float:
    return 1.0 if answer in str(completion[-1].content or "") else 0.0


class Echo(vf.MultiTurnEnv):  # type: ignore[misc]
    """Two turns: the environment answers the first with a user message."""

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
        return [{"role": "user", "content": "and again?"}]


def dataset() -> Any:
    return datasets.Dataset.from_list([{"question": "what is 2+3?", "answer": "5"}])


def check_logprobs(model: Any, outputs: list[dict[str, Any]]) -> int:
    """Every sample's sampled tokens scored by the trainer as the server scored them; returns the
    number of samples."""
    count = 0
    for out in outputs:
        assert out.get("error") is None, out["error"]
        for sample in merge_turns(turns_from_trajectory(out["trajectory"], version=0)):
            ids = torch.tensor([sample.input_ids])
            with torch.no_grad():
                lp = token_logprobs(model, ids, torch.ones_like(ids))[0]
            mask = torch.tensor(sample.loss_mask, dtype=torch.bool)
            assert float((lp[mask] - torch.tensor(sample.logprobs)[mask]).abs().max()) < ATOL
            count += 1
    return count


def test_a_single_turn_rollout_carries_the_templates_prompt_and_the_sampled_tokens(
    server: InferenceServer, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = vf.SingleTurnEnv(dataset=dataset(), rubric=vf.Rubric(funcs=[has_answer]))
    row = dict(env.get_dataset(n=1)[0])
    outs = asyncio.run(env.run_group([row, dict(row)], client(server, monkeypatch), "tiny", SAMPLING,
                                     state_columns=["trajectory"]))
    tok = load_tokenizer(tiny_model_dir)
    prompt = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                     return_dict=False)
    for out in outs:
        (step,) = out["trajectory"]
        assert step["tokens"]["prompt_ids"] == prompt
        ids = step["tokens"]["completion_ids"]
        assert 0 < len(ids) <= 6 and len(step["tokens"]["completion_logprobs"]) == len(ids)
        assert out["completion"][-1].content == tok.decode(ids, skip_special_tokens=True)
        assert out["reward"] == has_answer(out["completion"], "5")
    assert check_logprobs(load_model(tiny_model_dir), outs) == 2


def test_a_two_turn_rollout_becomes_samples_whose_logprobs_the_trainer_reproduces(
    server: InferenceServer, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Echo(dataset=dataset(), rubric=vf.Rubric(funcs=[has_answer]), max_turns=2)
    row = dict(env.get_dataset(n=1)[0])
    (out,) = asyncio.run(env.run_group([row], client(server, monkeypatch), "tiny", SAMPLING,
                                       state_columns=["trajectory"]))
    assert len(out["trajectory"]) == 2
    first, second = turns_from_trajectory(out["trajectory"], version=0)
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids  # the conversation goes on
    assert check_logprobs(load_model(tiny_model_dir), [out]) in (1, 2)  # merged, or split on a re-render
