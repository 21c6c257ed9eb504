"""The built-in server's /v1/chat/completions (training/inference/chat_api.py) over HTTP: vLLM's
response shape with return_token_ids and logprobs, the chat template's prompt, log-probs the
trainer reproduces, refusals of what is not served, and tool calls read in vLLM's hermes and
glm45 formats."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from training.inference.chat_api import ChatRequest, message, parse_glm45, parse_hermes, parse_request
from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model, token_logprobs
from training.tokenizer import load_tokenizer

MESSAGES = [{"role": "system", "content": "reply with the number."},
            {"role": "user", "content": [{"type": "text", "text": "what is 2+3?"}]}]


@pytest.fixture
def server(tiny_model_dir: Path) -> Iterator[InferenceServer]:
    tok = load_tokenizer(tiny_model_dir)
    srv = InferenceServer(Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 16), tok, "tiny")
    srv.start()
    yield srv
    srv.shutdown()


def post(srv: InferenceServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{srv.port}/v1/chat/completions"
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_token_ids_and_logprobs_are_vllms_and_the_trainer_reproduces_them(
    server: InferenceServer, tiny_model_dir: Path
) -> None:
    code, out = post(server, {"model": "tiny", "messages": MESSAGES, "n": 2, "max_completion_tokens": 6,
                              "temperature": 1.0, "seed": 5, "logprobs": True, "return_token_ids": True})
    assert code == 200 and out["object"] == "chat.completion"
    tok = load_tokenizer(tiny_model_dir)
    flat = [{"role": "system", "content": "reply with the number."},
            {"role": "user", "content": "what is 2+3?"}]
    prompt = tok.apply_chat_template(flat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out["prompt_token_ids"] == prompt and tok.decode(prompt).endswith("a: ")
    assert out["usage"]["prompt_tokens"] == len(prompt)
    model = load_model(tiny_model_dir)
    for choice in out["choices"]:
        ids = choice["token_ids"]
        assert len(ids) == 6 and choice["finish_reason"] == "length"
        assert [e["logprob"] for e in choice["logprobs"]["content"]] != []
        assert [e["token"] for e in choice["logprobs"]["content"]] == [tok.decode([t]) for t in ids]
        text = tok.decode(ids, skip_special_tokens=True)
        assert choice["message"] == {"role": "assistant", "content": text}
        full = torch.tensor([prompt + ids])
        lp = token_logprobs(model, full, torch.ones_like(full))[0, len(prompt):]
        served = torch.tensor([e["logprob"] for e in choice["logprobs"]["content"]])
        assert torch.allclose(lp, served, atol=1e-4)
    code, plain = post(server, {"messages": MESSAGES, "max_tokens": 3, "seed": 5})
    assert code == 200 and "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize(("body", "error"), [
    ({}, "messages must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]: needs a role"),
    ({"messages": MESSAGES, "top_logprobs": 5}, "top_logprobs is not served"),
    ({"messages": MESSAGES, "stream": True}, "stream are not served"),
    ({"messages": MESSAGES, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MESSAGES, "n": 0}, "n must be an integer >= 1"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "only text"),
])
def test_what_is_not_served_is_a_400_naming_the_field(server: InferenceServer, body: dict[str, Any],
                                                      error: str) -> None:
    code, out = post(server, body)
    assert code == 400 and error in out["error"]["message"]


PROPS = {"a": {"type": "integer"}, "b": {"type": "integer"}, "why": {"type": "string"}}
SCHEMA = {"type": "object", "properties": PROPS}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": SCHEMA}}]


def test_hermes_tool_calls_become_openai_tool_calls() -> None:
    req = ChatRequest(messages=[], tools=TOOLS)
    text = 'let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    msg, reason = message(text, "stop", req, "hermes")
    assert reason == "tool_calls" and msg["content"] == "let me add."
    (call,) = msg["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "add"
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    # not JSON inside the block: served as plain content, as vLLM does
    assert parse_hermes("<tool_call>add(2, 3)</tool_call>", TOOLS) is None
    assert message("<tool_call>add(2, 3)</tool_call>", "stop", req, "hermes")[1] == "stop"
    # tool_choice none: never parsed
    none = ChatRequest(messages=[], tools=TOOLS, tool_choice="none")
    assert message(text, "stop", none, "hermes") == ({"role": "assistant", "content": text}, "stop")


def test_glm45_arguments_follow_the_tool_schema() -> None:
    text = ("<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>2</arg_value>\n<arg_key>b</arg_key>\n"
            "<arg_value>3</arg_value>\n<arg_key>why</arg_key>\n<arg_value>42</arg_value>\n</tool_call>")
    (call,) = parse_glm45(text, TOOLS) or []
    assert call.name == "add" and call.arguments == {"a": 2, "b": 3, "why": "42"}  # "why" is a string
    msg, reason = message(text, "stop", ChatRequest(messages=[], tools=TOOLS), "glm45")
    assert reason == "tool_calls" and msg["content"] is None


def test_request_tool_call_arguments_reach_the_template_as_objects() -> None:
    req = parse_request({"messages": [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]})
    assert req.messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert req.messages[1]["content"] == ""
