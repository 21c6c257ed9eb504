"""The built-in server's `/v1/chat/completions`: the request and response shapes vLLM's OpenAI-compatible
server gives, so that a verifiers environment's client runs against it as against vLLM.

A request's messages are rendered with the model tokenizer's chat template (tools and
`chat_template_kwargs` passed to it, the generation prompt added), and the engine samples from
those token ids. With vLLM's `return_token_ids` the response carries `prompt_token_ids` and each
choice's `token_ids`; `logprobs: true` gives one `logprobs.content` entry per sampled token (token
text, or `token_id:<id>` with `return_tokens_as_token_ids`). When the request offers tools, the
completion's text is read for tool calls in the format of the model family (`TOOL_PARSERS`: vLLM's
`hermes` and `glm45`); found ones become `message.tool_calls` and the choice finishes with
`tool_calls`, as in vLLM.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from training.chat import prompt_ids as render_prompt_ids


class ChatRequestError(ValueError):
    """A request the server answers with HTTP 400; the message says which field."""


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    return_token_ids: bool = False
    tokens_as_ids: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def _content_text(content: Any, where: str) -> str:
    """Message content as text: a string, or OpenAI's list of parts of which only text is served."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise ChatRequestError(f"{where}: only text content parts are served")
        return "".join(str(p.get("text", "")) for p in content)
    raise ChatRequestError(f"{where}: content must be a string or a list of text parts")


def _template_message(m: Any, i: int) -> dict[str, Any]:
    """One message as chat templates read it: content as text, and tool-call arguments as objects
    (OpenAI sends JSON strings; templates render objects), as vLLM does before rendering."""
    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool", "developer"):
        raise ChatRequestError(f"messages[{i}]: needs a role of system, user, assistant, tool or developer")
    out = dict(m)
    out["content"] = _content_text(m.get("content"), f"messages[{i}]")
    calls = m.get("tool_calls")
    if calls:
        fixed = []
        for call in calls:
            fn = dict(call.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    raise ChatRequestError(f"messages[{i}]: tool call arguments are not JSON") from None
            fixed.append({**call, "function": fn})
        out["tool_calls"] = fixed
    return out


def _positive_int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ChatRequestError(f"{key} must be an integer >= 1")
    return value


def parse_request(body: dict[str, Any]) -> ChatRequest:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ChatRequestError("messages must be a non-empty list")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise ChatRequestError("temperature must be a number >= 0")
    if body.get("top_logprobs"):
        raise ChatRequestError("top_logprobs is not served (the trainer needs only the sampled token's)")
    if body.get("continue_final_message") or body.get("stream"):
        raise ChatRequestError("continue_final_message and stream are not served")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ChatRequestError("stop must be a non-empty string or a list of them")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ChatRequestError("tools must be a list of tool objects")
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none"):
        raise ChatRequestError("tool_choice: only 'auto' and 'none' are served")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ChatRequestError("chat_template_kwargs must be an object")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ChatRequestError("seed must be an integer")
    return ChatRequest(
        messages=[_template_message(m, i) for i, m in enumerate(msgs)],
        n=_positive_int(body, "n", 1),
        max_tokens=16 if max_tokens is None else _positive_int({"max_tokens": max_tokens}, "max_tokens", 16),
        temperature=float(temperature),
        seed=seed,
        stop=list(stop),
        logprobs=bool(body.get("logprobs", False)),
        return_token_ids=bool(body.get("return_token_ids", False)),
        tokens_as_ids=bool(body.get("return_tokens_as_token_ids", False)),
        tools=tools or None,
        tool_choice=choice,
        template_kwargs=dict(kwargs),
    )


def prompt_token_ids(tokenizer: Any, req: ChatRequest) -> list[int]:
    """The request's prompt as the model's chat template renders it, generation prompt included."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatRequestError("the served model's tokenizer has no chat template")
    ids = render_prompt_ids(tokenizer, req.messages, req.tools, **req.template_kwargs)
    if not ids:
        raise ChatRequestError("messages render to no tokens")
    return ids


# -- tool calls -------------------------------------------------------------------------------------
@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        return {"id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}", "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments)}}


_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def parse_hermes(text: str, tools: list[dict[str, Any]]) -> list[ToolCall] | None:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen and Hermes models); None when
    a block is not such JSON (the text is then served as content, as vLLM does)."""
    calls = []
    for block in _TOOL_BLOCK.findall(text):
        try:
            obj = json.loads(block)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return None
        args = obj.get("arguments", {})
        calls.append(ToolCall(obj["name"], args if isinstance(args, dict) else {}))
    return calls


def _glm_value(raw: str, is_string: bool) -> Any:
    if is_string:
        return raw
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(raw)
        except (ValueError, SyntaxError):
            pass
    return raw


def _string_params(tools: list[dict[str, Any]], name: str) -> set[str]:
    for tool in tools:
        fn = tool.get("function") or {}
        if fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
            return {k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"}
    return set()


def parse_glm45(text: str, tools: list[dict[str, Any]]) -> list[ToolCall] | None:
    """GLM-4.5's `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...</tool_call>`;
    a value is JSON unless the tool's schema declares the parameter a string."""
    calls = []
    for block in _TOOL_BLOCK.findall(text):
        name, _, rest = block.partition("\n")
        if not name.strip():
            return None
        strings = _string_params(tools, name.strip())
        args = {k.strip(): _glm_value(v.strip(), k.strip() in strings) for k, v in _GLM_ARG.findall(rest)}
        calls.append(ToolCall(name.strip(), args))
    return calls


TOOL_PARSERS: dict[str, Callable[[str, list[dict[str, Any]]], list[ToolCall] | None]] = {
    "hermes": parse_hermes,
    "glm45": parse_glm45,
}


def tool_parser_for(setting: str, model_type: str) -> str:
    """inference.tool_call_parser: "auto" picks the model family's format."""
    if setting != "auto":
        return setting
    return "glm45" if model_type in ("glm4_moe", "glm4") else "hermes"


def message(text: str, finish_reason: str, req: ChatRequest, parser: str) -> tuple[dict[str, Any], str]:
    """The choice's assistant message and finish reason."""
    if req.tools and req.tool_choice != "none":
        calls = TOOL_PARSERS[parser](text, req.tools)
        if calls:
            content = text[: text.find("<tool_call>")].strip()
            reason = "tool_calls" if finish_reason == "stop" else finish_reason
            return {"role": "assistant", "content": content or None,
                    "tool_calls": [c.openai() for c in calls]}, reason
    return {"role": "assistant", "content": text}, finish_reason


def logprobs_content(
    tokenizer: Any, tokens: list[int], logprobs: list[float], as_ids: bool
) -> list[dict[str, Any]]:
    out = []
    for t, lp in zip(tokens, logprobs, strict=True):
        tok = f"token_id:{t}" if as_ids else tokenizer.decode([t])
        out.append({"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")), "top_logprobs": []})
    return out
