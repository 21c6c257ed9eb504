"""Client for OpenAI-compatible completion servers: vLLM on GPUs, the built-in server on CPU.

It speaks vLLM's documented `/v1/completions` API
(https://docs.vllm.ai/en/stable/serving/openai_compatible_server.html#completions-api): token-id
prompts, `n`, `max_tokens`, `temperature`, `seed`, `stop`, and `logprobs: 0` with vLLM's
`return_tokens_as_token_ids`, so each choice's `logprobs.tokens` come back as "token_id:<id>" and
the trainer sees exactly the sampled tokens with their `logprobs.token_logprobs`. With
`--logprobs-mode processed_logprobs` (set by `opsctl launch`) those log-probs are taken after
temperature, as the trainer recomputes them.

Sampling is pinned to plain temperature sampling (`top_p = 1`, `top_k = -1`,
`repetition_penalty = 1`): otherwise vLLM fills unset fields from the model's
generation_config.json, and the server's log-probs would no longer be those of softmax(logits / T).

Weights reload through the server's weight-update endpoint (`POST /update_weights` with a
committed weight directory; training/inference/vllm_ext.py adds it to vLLM). Every failure is one
`ServerError` whose message names the request, the HTTP status and the server's own message.

A completion can be aborted from another thread through its `CancelHandle`: cancel() shuts the
request's connection down, the blocked read fails at once and complete() raises `RequestCancelled`.
Closing the connection is the portable abort: vLLM's OpenAI server cancels a request whose client
disconnects (its completion route listens for the HTTP disconnect), and so does the built-in server.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any


class ServerError(RuntimeError):
    """A failed request; `status` is the HTTP status, None when the server could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RequestCancelled(RuntimeError):
    """The request was aborted through its CancelHandle; no result exists."""


class CancelHandle:
    """Aborts one in-flight request from any thread. cancel() before the request is sent keeps it
    from being sent; during it, shuts its socket down so the server sees the client leave."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._sock: socket.socket | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:  # the owner detaches under the lock before closing: no reused fd is hit
            self._cancelled = True
            if self._sock is not None:
                _shutdown(self._sock)

    def _attach(self, sock: socket.socket, where: str) -> None:
        with self._lock:
            if self._cancelled:
                raise RequestCancelled(f"{where}: cancelled before it was sent")
            self._sock = sock

    def _detach(self) -> None:
        with self._lock:
            self._sock = None


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread (EOF)


@dataclass
class Completion:
    tokens: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    # Oldest and newest policy version among the tokens, when the server reports it; else None.
    versions: tuple[int, int] | None


def _parse_token(tok: Any) -> int:
    if not isinstance(tok, str) or not tok.startswith("token_id:"):
        raise ServerError(f"expected token ids (return_tokens_as_token_ids), got {tok!r}")
    try:
        return int(tok.split(":", 1)[1])
    except ValueError:
        raise ServerError(f"malformed token id {tok!r}") from None


def error_message(raw: bytes) -> str:
    """The message of an error body: vLLM's {"error": {"message", "type", "code"}}, its older flat
    {"object": "error", "message", "type", "code"}, or the raw text."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode(errors="replace").strip()[:300] or "(empty body)"
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, str):
        return err[:300]
    info = err if isinstance(err, dict) else body if isinstance(body, dict) else {}
    msg = str(info.get("message") or info.get("detail") or json.dumps(body)[:300])
    kind = info.get("type")
    return f"{kind}: {msg}" if kind else msg


class OpenAICompatClient:
    def __init__(
        self,
        base_url: str,
        model: str = "policy",
        update_weights_path: str = "/update_weights",
        timeout: float = 600.0,
        stop: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.update_weights_path = update_weights_path
        self.timeout = timeout
        self.stop = list(stop)

    @classmethod
    def from_config(cls, base_url: str, inference: Any) -> OpenAICompatClient:
        """A client for one server of the job's [inference] section (training.config.InferenceConfig)."""
        return cls(
            base_url,
            model=inference.served_model_name,
            update_weights_path=inference.update_weights_path,
            stop=inference.stop,
            timeout=inference.request_timeout_s,
        )

    def _connection(self, where: str) -> tuple[http.client.HTTPConnection, str]:
        """A connection to the server and the path prefix of base_url."""
        url = urllib.parse.urlsplit(self.base_url)
        kinds = {"http": http.client.HTTPConnection, "https": http.client.HTTPSConnection}
        if url.scheme not in kinds or not url.hostname:
            raise ServerError(f"{where}: unreachable: not an http(s) URL")
        return kinds[url.scheme](url.hostname, url.port, timeout=self.timeout), url.path

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, cancel: CancelHandle | None = None
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        where = f"{method} {self.base_url}{path}"
        conn, prefix = self._connection(where)
        try:
            conn.connect()
            if cancel is not None:
                assert conn.sock is not None
                cancel._attach(conn.sock, where)
            # One request per connection, as urllib did: the server's handler ends with the answer.
            headers = {"Content-Type": "application/json", "Connection": "close"}
            conn.request(method, prefix + path, body=data, headers=headers)
            resp = conn.getresponse()
            status, raw = resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            if cancel is not None and cancel.cancelled:
                raise RequestCancelled(f"{where}: cancelled") from None
            raise ServerError(f"{where}: unreachable: {exc}") from None
        finally:
            if cancel is not None:
                cancel._detach()
            conn.close()
        if not 200 <= status < 300:
            raise ServerError(f"{where}: HTTP {status}: {error_message(raw)}", status)
        if not raw.strip():
            return None  # vLLM answers GET /health with an empty 200
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise ServerError(f"{where}: response is not JSON: {raw[:200]!r}") from None

    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/health") or {})

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Poll GET /health until it answers 200; unreachable or 5xx (loading) is retried."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                self._request("GET", "/health")
                return
            except ServerError as exc:
                if exc.status is not None and exc.status < 500:
                    raise
                if time.monotonic() + delay > deadline:
                    raise ServerError(f"{self.base_url} not ready after {timeout:g}s: {exc}") from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def complete(
        self,
        prompts: list[list[int]],
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None = None,
        stop: list[str] | None = None,
        cancel: CancelHandle | None = None,
    ) -> list[list[Completion]]:
        """One request for all prompts; returns n completions per prompt, in prompt order.
        Raises RequestCancelled when `cancel` aborted it before the answer was read."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompts,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": 1.0,
            "top_k": -1,
            "repetition_penalty": 1.0,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        }
        stops = self.stop if stop is None else stop
        if stops:
            body["stop"] = list(stops)
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)  # OpenAI `stop`: the environment's end-of-answer strings
        out = self._request("POST", "/v1/completions", body, cancel)
        where = f"POST {self.base_url}/v1/completions"
        if not isinstance(out, dict) or not isinstance(out.get("choices"), list):
            raise ServerError(f"{where}: no choices in the response")
        choices = sorted(out["choices"], key=lambda c: c["index"])
        if [c["index"] for c in choices] != list(range(len(prompts) * n)):
            raise ServerError(f"{where}: expected choices 0..{len(prompts) * n - 1}, got {len(choices)}")
        comps = [self._completion(c, where) for c in choices]
        return [comps[i * n : (i + 1) * n] for i in range(len(prompts))]

    @staticmethod
    def _completion(choice: dict[str, Any], where: str) -> Completion:
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            raise ServerError(f"{where}: choice {choice['index']} has no logprobs")
        toks = [_parse_token(t) for t in lp.get("tokens") or []]
        raw_lps = lp.get("token_logprobs") or []
        if len(toks) != len(raw_lps):
            raise ServerError(f"{where}: tokens and token_logprobs differ in length")
        if any(not isinstance(x, int | float) for x in raw_lps):
            raise ServerError(f"{where}: choice {choice['index']} has a token without a log-prob")
        pv = choice.get("policy_version")  # the built-in server's; vLLM reports none
        return Completion(
            toks,
            [float(x) for x in raw_lps],
            choice.get("text", ""),
            choice.get("finish_reason") or "length",
            (int(pv[0]), int(pv[1])) if pv else None,
        )

    def update_weights(self, weight_dir: str, version: int) -> float:
        t0 = time.perf_counter()
        self._request("POST", self.update_weights_path, {"weight_dir": weight_dir, "version": version})
        return time.perf_counter() - t0
