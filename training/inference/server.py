"""HTTP front of the engine: the subset of vLLM's OpenAI-compatible API the orchestrator uses.

GET  /health                 {"status": "ok", "version": N, "paused": bool}
GET  /v1/models              the served model
POST /v1/completions         prompt(s) as text or token ids, n, max_tokens, temperature, seed,
                             stop (a string or list of strings), logprobs, and vLLM's extensions
                             return_tokens_as_token_ids, include_stop_str_in_output and
                             add_special_tokens (text prompts start with BOS when the tokenizer
                             has one, as in vLLM; false leaves it out)
POST /v1/chat/completions    messages rendered with the model's chat template, tools and tool calls,
                             logprobs, and vLLM's return_token_ids (prompt and completion token
                             ids): training/inference/chat_api.py
POST /update_weights         {"weight_dir": DIR, "version": N}: load the model directory DIR, then
                             pause, swap, resume: in-flight requests continue
POST /pause, POST /resume
GET  /metrics                Prometheus exposition

A completion whose client disconnects before the answer is aborted, as vLLM's server does: the
handler checks the connection every 50 ms while it waits and, once the client has closed it, tells
the engine to drop the request's sequences at its next step and answers nothing.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from training.envs.base import prompt_ids
from training.fsutil import STABLE
from training.inference import chat_api
from training.inference.engine import Engine
from training.weights import WeightsError, load_trainer_state

log = logging.getLogger("inference")


class BadRequest(ValueError):
    pass


class ClientGone(Exception):
    """The client closed the connection before its completion was ready."""


# How often a handler waiting for a completion checks whether its client hung up.
DISCONNECT_POLL_S = 0.05


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client has closed (or reset) the connection: a non-blocking peek reads EOF.
    Bytes waiting to be read mean it is still there (nothing is consumed)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # open, nothing sent: the normal case while a request is generated
    except OSError:
        return True  # reset or otherwise broken


def _prompts(body: dict[str, Any], tokenizer: Any) -> list[list[int]]:
    p = body.get("prompt")
    special = body.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise BadRequest("add_special_tokens must be true or false")

    def encode(text: str) -> list[int]:
        ids = prompt_ids(tokenizer, text) if special else tokenizer.encode(text, add_special_tokens=False)
        if not ids:
            raise BadRequest("prompt encodes to no tokens")
        return list(ids)

    if isinstance(p, str):
        return [encode(p)]
    if isinstance(p, list) and p and all(isinstance(x, int) for x in p):
        return [list(p)]
    if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
        return [encode(x) for x in p]
    if (
        isinstance(p, list)
        and p
        and all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in p)
    ):
        return [list(x) for x in p]
    raise BadRequest("prompt must be a string, a list of strings, token ids or lists of token ids")


class _HTTPServer(ThreadingHTTPServer):
    # The orchestrator keeps a request per in-flight group open: the default listen backlog of 5
    # overflows under load (connections reset, or SYN retries that stall a request for seconds).
    request_queue_size = 256


def _stop(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(x, str) and x for x in stop):
        raise BadRequest("stop must be a non-empty string or a list of non-empty strings")
    return list(stop)


def _cut_at_stop(text: str, stop: str | None, include: bool) -> str:
    """OpenAI semantics: the text ends before the stop string (with it, when include)."""
    if stop is None or stop not in text:
        return text
    end = text.index(stop) + (len(stop) if include else 0)
    return text[:end]


class InferenceServer:
    def __init__(
        self, engine: Engine, tokenizer: Any, model_name: str, host: str = "127.0.0.1", port: int = 0,
        tool_parser: str = "hermes",
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.tool_parser = tool_parser  # chat_api.TOOL_PARSERS
        self.registry = CollectorRegistry()
        self.m_requests = Counter("opsctl_inference_requests", "Completion requests", registry=self.registry)
        self.m_tokens = Gauge("opsctl_inference_tokens_generated", "Tokens generated", registry=self.registry)
        self.m_version = Gauge(
            "opsctl_inference_policy_version", "Loaded policy version", registry=self.registry
        )
        self.m_update = Gauge(
            "opsctl_inference_weight_update_seconds", "Last weight update pause", registry=self.registry
        )
        self.m_inflight = Gauge("opsctl_inference_in_flight", "Sequences in flight", registry=self.registry)
        self.m_aborted = Counter(
            "opsctl_inference_requests_aborted",
            "Completion requests aborted because the client disconnected",
            registry=self.registry,
        )
        self._update_lock = threading.Lock()
        if engine.detokenize is None:  # stop strings are matched on text
            engine.detokenize = lambda ids: str(tokenizer.decode(ids, skip_special_tokens=True))
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug(fmt, *args)

            def _send(self, code: int, payload: Any, ctype: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except json.JSONDecodeError as exc:
                    raise BadRequest(f"invalid JSON: {exc}") from None
                if not isinstance(body, dict):
                    raise BadRequest("body must be a JSON object")
                return body

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(
                        200,
                        {"status": "ok", "version": server.engine.version, "paused": server.engine.paused},
                    )
                elif self.path == "/v1/models":
                    self._send(
                        200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]}
                    )
                elif self.path == "/metrics":
                    server.m_tokens.set(server.engine.tokens_generated)
                    server.m_inflight.set(server.engine.in_flight())
                    server.m_version.set(server.engine.version)
                    self._send(200, generate_latest(server.registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                try:
                    body = self._body()
                    if self.path == "/v1/completions":
                        self._send(200, server.complete(body, lambda: peer_closed(self.connection)))
                    elif self.path == "/v1/chat/completions":
                        self._send(200, server.chat(body, lambda: peer_closed(self.connection)))
                    elif self.path == "/update_weights":
                        self._send(200, server.update_weights(body))
                    elif self.path == "/pause":
                        server.engine.pause()
                        self._send(200, {"paused": True})
                    elif self.path == "/resume":
                        server.engine.resume()
                        self._send(200, {"paused": False})
                    else:
                        self._send(404, {"error": {"message": f"no route {self.path}"}})
                except ClientGone:
                    self.close_connection = True  # nobody to answer
                except BadRequest as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "BadRequestError"}})
                except Exception as exc:
                    log.exception("request failed")
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})

        self.httpd = _HTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])

    def complete(self, body: dict[str, Any], client_gone: Callable[[], bool] | None = None) -> dict[str, Any]:
        """The completion response; raises ClientGone (after cancelling the engine's request) as
        soon as `client_gone()` says the client disconnected while it was generated."""
        prompts = _prompts(body, self.tokenizer)
        n = int(body.get("n", 1))
        max_tokens = int(body.get("max_tokens", 16))
        temperature = float(body.get("temperature", 1.0))
        if n < 1 or max_tokens < 1 or temperature < 0:
            raise BadRequest("n and max_tokens must be >= 1, temperature >= 0")
        seed = body.get("seed")
        stop = _stop(body)
        include_stop = bool(body.get("include_stop_str_in_output", False))
        as_ids = bool(body.get("return_tokens_as_token_ids", False))
        want_lp = body.get("logprobs") is not None
        req = self._generate(prompts, n, max_tokens, temperature, None if seed is None else int(seed), stop,
                             client_gone)
        seqs = req.seqs
        choices = []
        for idx, s in enumerate(seqs):
            toks = [f"token_id:{t}" if as_ids else self.tokenizer.decode([t]) for t in s.tokens]
            choice: dict[str, Any] = {
                "index": idx,
                # Token ids and logprobs keep every sampled token; only the text is cut at the stop.
                "text": _cut_at_stop(
                    self.tokenizer.decode(s.tokens, skip_special_tokens=True), s.stop_reason, include_stop
                ),
                "finish_reason": s.finish_reason,
                "stop_reason": s.stop_reason,
                # Not in vLLM: the policy versions that produced this completion's tokens.
                "policy_version": [min(s.versions), max(s.versions)],
                "logprobs": None,
            }
            if want_lp:
                choice["logprobs"] = {
                    "tokens": toks,
                    "token_logprobs": s.logprobs,
                    "top_logprobs": None,
                    "text_offset": None,
                }
            choices.append(choice)
        n_prompt = sum(len(p) for p in prompts) * n
        n_comp = sum(len(s.tokens) for s in seqs)
        return {
            "id": f"cmpl-{req.id}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_comp,
                "total_tokens": n_prompt + n_comp,
            },
        }

    def _generate(self, prompts: list[list[int]], n: int, max_tokens: int, temperature: float,
                  seed: int | None, stop: list[str], client_gone: Callable[[], bool] | None) -> Any:
        """Submit to the engine and wait; a client that hangs up cancels the request (ClientGone)."""
        self.m_requests.inc()
        req = self.engine.submit(prompts, n=n, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                 stop=stop)
        while not req.done.wait(DISCONNECT_POLL_S):
            if client_gone is not None and client_gone():
                self.engine.cancel(req)
                self.m_aborted.inc()
                log.info("request %d aborted: the client disconnected", req.id)
                raise ClientGone
        return req

    def chat(self, body: dict[str, Any], client_gone: Callable[[], bool] | None = None) -> dict[str, Any]:
        """A chat completion in vLLM's response shape (training/inference/chat_api.py)."""
        try:
            creq = chat_api.parse_request(body)
            prompt = chat_api.prompt_token_ids(self.tokenizer, creq)
        except chat_api.ChatRequestError as exc:
            raise BadRequest(str(exc)) from None
        req = self._generate([prompt], creq.n, creq.max_tokens, creq.temperature, creq.seed, creq.stop,
                             client_gone)
        choices = []
        for idx, s in enumerate(req.seqs):
            decoded = self.tokenizer.decode(s.tokens, skip_special_tokens=True)
            text = _cut_at_stop(decoded, s.stop_reason, False)
            msg, reason = chat_api.message(text, s.finish_reason, creq, self.tool_parser)
            choice: dict[str, Any] = {
                "index": idx, "message": msg, "finish_reason": reason, "stop_reason": s.stop_reason,
                "policy_version": [min(s.versions), max(s.versions)], "logprobs": None,
            }
            if creq.logprobs:
                content = chat_api.logprobs_content(self.tokenizer, s.tokens, s.logprobs, creq.tokens_as_ids)
                choice["logprobs"] = {"content": content}
            if creq.return_token_ids:
                choice["token_ids"] = list(s.tokens)
            choices.append(choice)
        n_comp = sum(len(s.tokens) for s in req.seqs)
        out: dict[str, Any] = {
            "id": f"chatcmpl-{req.id}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": n_comp,
                      "total_tokens": len(prompt) + n_comp},
        }
        if creq.return_token_ids:
            out["prompt_token_ids"] = prompt
        return out

    def update_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        weight_dir = body.get("weight_dir")
        version = body.get("version")
        if not isinstance(weight_dir, str) or not isinstance(version, int):
            raise BadRequest("update_weights needs weight_dir (string) and version (integer)")
        if not (Path(weight_dir) / STABLE).exists():
            raise BadRequest(f"{weight_dir} is not a committed weight directory")
        with self._update_lock:
            t0 = time.perf_counter()
            try:  # read before pausing: generation only stops for the swap
                state = load_trainer_state(Path(weight_dir))
            except WeightsError as exc:
                raise BadRequest(f"{weight_dir} is not a committed weight directory: {exc}") from None
            paused_s = self.engine.update_weights(state, version)
            self.m_update.set(paused_s)
        return {"version": version, "paused_s": paused_s, "load_s": time.perf_counter() - t0}

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="http", daemon=True)
        t.start()
        return t

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.engine.stop()
