"""The OpenAI-compatible client against a real server (the built-in one, over HTTP)."""

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerFast

from training.fsutil import publish_dir
from training.inference.client import CancelHandle, OpenAICompatClient, RequestCancelled, ServerError
from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model, token_logprobs
from training.tokenizer import load_tokenizer


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


def test_stop_strings_cut_the_text_but_keep_the_tokens(server: InferenceServer) -> None:
    client = OpenAICompatClient(f"http://127.0.0.1:{server.port}")
    tok = server.tokenizer
    prompt = [[1, 5, 40, 6, 45]]
    (free,) = client.complete(prompt, n=1, max_tokens=12, temperature=0.0)[0]
    stop = free.text[4:6]
    cut = free.text.index(stop)
    (c,) = client.complete(prompt, n=1, max_tokens=12, temperature=0.0, stop=[stop, "@@"])[0]
    assert c.finish_reason == "stop"
    assert c.text == free.text[:cut]  # OpenAI semantics: the text stops before the stop string
    assert tok.decode(c.tokens, skip_special_tokens=True) == free.text[: cut + len(stop)]  # all tokens
    assert c.tokens == free.tokens[: len(c.tokens)] and len(c.logprobs) == len(c.tokens)
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "stop": stop}
    out = client._request("POST", "/v1/completions", {**body, "include_stop_str_in_output": True})
    raw = out["choices"][0]
    assert (raw["text"], raw["stop_reason"]) == (free.text[: cut + len(stop)], stop)
    for bad in ([1], "", [""], {"a": 1}):
        with pytest.raises(ServerError, match="400"):
            client._request("POST", "/v1/completions", {"prompt": prompt, "stop": bad})


def test_text_prompts_get_bos_only_when_the_tokenizer_has_one(
    tiny_model_dir: Path, no_bos_tokenizer: PreTrainedTokenizerFast
) -> None:
    for tok, bos in ((load_tokenizer(tiny_model_dir), 1), (no_bos_tokenizer, 0)):
        eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 4)
        srv = InferenceServer(eng, tok, "tiny", "127.0.0.1", 0)
        srv.start()
        try:
            client = OpenAICompatClient(f"http://127.0.0.1:{srv.port}")
            body = {"prompt": ["12+3=", "4+5="], "max_tokens": 2, "temperature": 0}
            out = client._request("POST", "/v1/completions", body)
            assert out["usage"]["prompt_tokens"] == len("12+3=") + len("4+5=") + 2 * bos
            assert len(out["choices"]) == 2
            plain = client._request("POST", "/v1/completions", {**body, "add_special_tokens": False})
            assert plain["usage"]["prompt_tokens"] == len("12+3=") + len("4+5=")
        finally:
            srv.shutdown()


def wait_for(cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_cancelled_completion_is_aborted_on_the_server(server: InferenceServer) -> None:
    eng = server.engine
    client = OpenAICompatClient(f"http://127.0.0.1:{server.port}", timeout=60)
    handle = CancelHandle()
    outcome: list[BaseException] = []

    def long_completion() -> None:
        try:
            client.complete([[1, 5, 6]], n=2, max_tokens=200, temperature=1.0, seed=1, cancel=handle)
        except BaseException as exc:
            outcome.append(exc)

    th = threading.Thread(target=long_completion, daemon=True)
    th.start()
    wait_for(lambda: eng.tokens_generated > 0)  # the server is generating it
    eng.pause()  # from here on the completion cannot finish: only the abort can end the call
    generated = eng.tokens_generated
    handle.cancel()
    th.join(30)
    assert not th.is_alive() and len(outcome) == 1 and isinstance(outcome[0], RequestCancelled)
    aborted = "opsctl_inference_requests_aborted_total"
    wait_for(lambda: server.registry.get_sample_value(aborted) == 1.0)  # the handler saw it leave
    assert eng.in_flight() == 2  # paused: the engine drops it at its next step
    eng.resume()
    wait_for(lambda: eng.in_flight() == 0)
    assert eng.tokens_generated == generated < 2 * 200  # not one token after the abort
    # A handle cancelled before the call sends nothing; the server serves the next request as usual.
    requests = server.registry.get_sample_value("opsctl_inference_requests_total")
    early = CancelHandle()
    early.cancel()
    with pytest.raises(RequestCancelled, match="before it was sent"):
        client.complete([[1, 5]], n=1, max_tokens=3, temperature=1.0, cancel=early)
    (done,) = client.complete([[1, 5]], n=1, max_tokens=3, temperature=1.0, cancel=CancelHandle())[0]
    assert len(done.tokens) == 3 and done.finish_reason == "length"
    assert server.registry.get_sample_value("opsctl_inference_requests_total") == requests + 1
    assert server.registry.get_sample_value(aborted) == 1.0
