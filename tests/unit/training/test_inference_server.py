"""The OpenAI-compatible client against a real server (the built-in one, over HTTP)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from training.fsutil import publish_dir
from training.inference.client import OpenAICompatClient, ServerError
from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model, load_tokenizer, token_logprobs


@pytest.fixture
def server(tiny_model_dir: Path) -> Iterator[InferenceServer]:
    tok = load_tokenizer(tiny_model_dir)
    eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 16)  # length stops only
    srv = InferenceServer(eng, tok, "tiny", "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.shutdown()


def test_completions_with_token_ids_and_logprobs_match_the_trainer(
    server: InferenceServer, tiny_model_dir: Path
) -> None:
    client = OpenAICompatClient(f"http://127.0.0.1:{server.port}")
    client.wait_ready(10)
    assert client.health()["version"] == 0
    prompts = [[1, 5, 40, 6, 45], [1, 7, 7, 40, 8, 45]]
    out = client.complete(prompts, n=3, max_tokens=5, temperature=1.0, seed=11)
    assert [len(g) for g in out] == [3, 3]
    model = load_model(tiny_model_dir)
    for prompt, group in zip(prompts, out, strict=True):
        for c in group:
            assert len(c.tokens) == len(c.logprobs) == 5
            assert c.versions == (0, 0)
            ids = torch.tensor([prompt + c.tokens])
            lp = token_logprobs(model, ids, torch.ones_like(ids))[0, len(prompt) :]
            assert torch.allclose(lp, torch.tensor(c.logprobs), atol=1e-4)


def test_update_weights_endpoint(server: InferenceServer, tiny_model_dir: Path, tmp_path: Path) -> None:
    client = OpenAICompatClient(f"http://127.0.0.1:{server.port}")
    sd = {k: (v + 0.5).contiguous() for k, v in load_model(tiny_model_dir).state_dict().items()}
    wdir = publish_dir(tmp_path / "weights" / "step_1", lambda d: save_file(sd, str(d / "model.safetensors")))
    client.update_weights(str(wdir), 1)
    assert client.health()["version"] == 1
    assert torch.equal(server.engine.model.state_dict()["lm_head.weight"], sd["lm_head.weight"])
    (tmp_path / "weights" / "step_2").mkdir()
    with pytest.raises(ServerError, match="400"):
        client.update_weights(str(tmp_path / "weights" / "step_2"), 2)  # no STABLE marker: refused


def test_bad_requests_are_400(server: InferenceServer) -> None:
    client = OpenAICompatClient(f"http://127.0.0.1:{server.port}")
    with pytest.raises(ServerError, match="400"):
        client._request("POST", "/v1/completions", {"prompt": 5})
    text = client._request("POST", "/v1/completions", {"prompt": "12+3=", "max_tokens": 2, "temperature": 0})
    assert text["choices"][0]["logprobs"] is None and text["usage"]["completion_tokens"] == 2
