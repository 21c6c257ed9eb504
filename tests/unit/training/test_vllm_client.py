"""The completion client against a loopback server speaking vLLM's documented API (fake_vllm.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_vllm import EOS, FakeVLLM, processed_logprob

from training.config import load_config
from training.inference.client import OpenAICompatClient, ServerError
from training.rundir import free_port


@pytest.fixture
def vllm() -> Iterator[FakeVLLM]:
    with FakeVLLM("intellect3-policy") as server:
        yield server


def client_for(url: str, *overrides: str) -> OpenAICompatClient:
    cfg = load_config(None, ["inference.served_model_name=intellect3-policy", *overrides])
    return OpenAICompatClient.from_config(url, cfg.inference)


def test_request_carries_the_served_name_and_sampling_parameters(vllm: FakeVLLM) -> None:
    client = client_for(vllm.url, 'inference.stop=["=", "\\n"]')
    client.wait_ready(5)  # vLLM's /health is an empty 200
    client.complete([[3, 4], [5]], n=2, max_tokens=6, temperature=0.7, seed=9)
    body = vllm.requests[-1]
    assert body["model"] == "intellect3-policy"
    assert body["prompt"] == [[3, 4], [5]]
    assert (body["n"], body["max_tokens"], body["temperature"], body["seed"]) == (2, 6, 0.7, 9)
    assert body["stop"] == ["=", "\n"]
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    # Plain temperature sampling whatever the model's generation_config.json says.
    assert (body["top_p"], body["top_k"], body["repetition_penalty"]) == (1.0, -1, 1.0)


def test_completions_come_back_per_prompt_with_their_processed_logprobs(vllm: FakeVLLM) -> None:
    client = client_for(vllm.url)
    prompts = [[1, 2, 3], [7], [9, 9]]
    out = client.complete(prompts, n=3, max_tokens=5, temperature=0.7, seed=4)
    assert [len(group) for group in out] == [3, 3, 3]
    for prompt, group in zip(prompts, out, strict=True):
        for c in group:
            assert 1 <= len(c.tokens) == len(c.logprobs) <= 5
            assert c.versions is None  # vLLM reports no policy version
            prev = [prompt[-1], *c.tokens[:-1]]
            want = [processed_logprob(p, t, 0.7) for p, t in zip(prev, c.tokens, strict=True)]
            assert c.logprobs == pytest.approx(want, abs=1e-12)
            assert c.finish_reason == ("stop" if c.tokens[-1] == EOS else "length")
    again = client.complete(prompts, n=3, max_tokens=5, temperature=0.7, seed=4)
    assert [[c.tokens for c in g] for g in again] == [[c.tokens for c in g] for g in out]


def test_stop_strings_end_a_completion_and_keep_its_tokens(vllm: FakeVLLM) -> None:
    client = client_for(vllm.url)
    free = client.complete([[3]], n=4, max_tokens=12, temperature=1.0, seed=1)[0]
    stopped = client.complete([[3]], n=4, max_tokens=12, temperature=1.0, seed=1, stop=["5"])[0]
    cut = 0
    for a, b in zip(free, stopped, strict=True):
        assert a.tokens[: len(b.tokens)] == b.tokens  # same samples, cut at the stop
        if b.finish_reason == "stop" and b.tokens[-1] != EOS:
            assert "5" not in b.text and b.tokens[-1] == 6  # VOCAB[6] == "5": the token that stopped it
            cut += 1
    assert cut >= 1


def test_bad_parameters_are_one_clear_error(vllm: FakeVLLM) -> None:
    client = client_for(vllm.url)
    with pytest.raises(ServerError) as exc:
        client.complete([[3]], n=1, max_tokens=4, temperature=-1.0)
    msg = str(exc.value)
    assert exc.value.status == 400 and "\n" not in msg
    assert msg.endswith("HTTP 400: BadRequestError: temperature must be non-negative, got -1.0.")
    assert msg.startswith(f"POST {vllm.url}/v1/completions")


def test_a_wrong_served_model_name_names_the_model(vllm: FakeVLLM) -> None:
    client = OpenAICompatClient(vllm.url)  # asks for "policy"
    with pytest.raises(ServerError, match=r"HTTP 404: NotFoundError: The model `policy` does not exist\."):
        client.complete([[3]], n=1, max_tokens=2, temperature=1.0)


def test_unreachable_server_and_readiness_timeout() -> None:
    client = OpenAICompatClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(ServerError, match="unreachable") as exc:
        client.complete([[3]], n=1, max_tokens=2, temperature=1.0)
    assert exc.value.status is None
    with pytest.raises(ServerError, match=r"not ready after 0\.3s"):
        client.wait_ready(0.3)


def test_responses_without_token_ids_are_rejected(vllm: FakeVLLM) -> None:
    client = client_for(vllm.url)
    original = vllm.complete

    def without_ids(body: dict) -> dict:
        return original({**body, "return_tokens_as_token_ids": False})

    vllm.complete = without_ids  # type: ignore[method-assign]
    with pytest.raises(ServerError, match="expected token ids"):
        client.complete([[3]], n=1, max_tokens=3, temperature=1.0, seed=0)
