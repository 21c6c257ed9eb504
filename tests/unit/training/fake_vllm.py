"""A loopback HTTP server that answers exactly as vLLM's OpenAI-compatible server documents.

Shapes, from https://docs.vllm.ai/en/stable/serving/openai_compatible_server.html (Completions API
and its extra parameters) and the pydantic models that page points to
(https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/protocol.py:
CompletionResponse, CompletionResponseChoice, CompletionLogProbs, ErrorResponse/ErrorInfo):

- GET /health: 200 with an empty body.
- POST /v1/completions: {"id", "object": "text_completion", "created", "model", "choices": [{"index",
  "text", "logprobs": {"text_offset", "token_logprobs", "tokens", "top_logprobs"}, "finish_reason",
  "stop_reason"}], "usage"}; choice index = prompt index * n + sample index; with
  return_tokens_as_token_ids the tokens are "token_id:<id>".
- errors: {"error": {"message", "type", "param", "code"}} with the HTTP status as code (400
  BadRequestError for invalid parameters, 404 NotFoundError for an unknown model).

The "model" is a fixed function of the previous token over a 16-token vocabulary, sampled with
softmax(logits / T); the log-probs it returns are those processed ones (--logprobs-mode
processed_logprobs), which `processed_logprob` recomputes for the tests.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VOCAB = ["<eos>", *list("0123456789+=\n ab")]
EOS = 0
MAX_LOGPROBS = 20  # vLLM's --max-logprobs default


def logits(prev: int) -> list[float]:
    return [3.0 * math.sin(0.7 * v + 1.3 * prev) for v in range(len(VOCAB))]


def processed_logprob(prev: int, tok: int, temperature: float) -> float:
    t = temperature if temperature > 0 else 1.0
    z = [x / t for x in logits(prev)]
    m = max(z)
    return z[tok] - (m + math.log(sum(math.exp(x - m) for x in z)))


class BadRequest(Exception):
    def __init__(
        self, message: str, kind: str = "BadRequestError", code: int = 400, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind, self.code, self.param = kind, code, param


class FakeVLLM:
    def __init__(self, served_model_name: str = "policy", port: int = 0) -> None:
        self.name = served_model_name
        self.requests: list[dict[str, Any]] = []
        self.fail_next: list[int] = []  # HTTP statuses the next completion requests get instead
        self.loaded: list[tuple[str, int]] = []  # POST /update_weights (opsctl's route), in order
        self.fail_updates: list[int] = []  # HTTP statuses the next weight updates get instead
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                pass

            def _send(self, code: int, payload: Any) -> None:
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, None)
                else:
                    self._send(404, {"detail": "Not Found"})  # FastAPI's answer to an unknown route

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(n))
                    if self.path == "/update_weights":
                        if fake.fail_updates:
                            code = fake.fail_updates.pop(0)
                            raise BadRequest(f"injected {code}", "ServiceUnavailableError", code)
                        fake.loaded.append((body["weight_dir"], body["version"]))
                        self._send(200, {"version": body["version"]})
                        return
                    if self.path != "/v1/completions":
                        self._send(404, {"detail": "Not Found"})
                        return
                    fake.requests.append(body)
                    if fake.fail_next:
                        code = fake.fail_next.pop(0)
                        raise BadRequest(f"injected {code}", "ServiceUnavailableError", code)
                    self._send(200, fake.complete(body))
                except BadRequest as exc:
                    err = {"message": str(exc), "type": exc.kind, "param": exc.param, "code": exc.code}
                    self._send(exc.code, {"error": err})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeVLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("model") != self.name:
            model = body.get("model")
            raise BadRequest(f"The model `{model}` does not exist.", "NotFoundError", 404, "model")
        prompts = body.get("prompt")
        if not (isinstance(prompts, list) and prompts and all(isinstance(p, list) and p for p in prompts)):
            raise BadRequest("this fake takes token-id prompts only", param="prompt")
        n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens", 16))
        temperature = float(body.get("temperature", 1.0))
        lp_n = body.get("logprobs")
        if n < 1:
            raise BadRequest("n must be at least 1, got 0.", param="n")
        if temperature < 0:
            raise BadRequest(f"temperature must be non-negative, got {temperature}.", param="temperature")
        if lp_n is not None and not 0 <= lp_n <= MAX_LOGPROBS:
            raise BadRequest(f"Requested sample logprobs of {lp_n}, which is greater than max allowed: "
                             f"{MAX_LOGPROBS}", param="logprobs")
        stops = body.get("stop") or []
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        seed = body.get("seed")
        choices = []
        for i, prompt in enumerate(prompts):
            for j in range(n):
                rng = random.Random(f"{seed}:{i}:{j}" if seed is not None else None)
                choices.append(self._sample(len(choices), prompt, max_tokens, temperature, rng, stops,
                                            as_ids, lp_n is not None))
        n_prompt = sum(len(p) for p in prompts)
        n_comp = sum(len(c["logprobs"]["tokens"]) if c["logprobs"] else 0 for c in choices)
        return {
            "id": "cmpl-0123456789abcdef",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": choices,
            "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_comp,
                      "completion_tokens": n_comp, "prompt_tokens_details": None},
        }

    def _sample(self, index: int, prompt: list[int], max_tokens: int, temperature: float, rng: random.Random,
                stops: list[str], as_ids: bool, want_lp: bool) -> dict[str, Any]:
        prev, toks, lps, text = prompt[-1], [], [], ""
        finish, stop_reason = "length", None
        for _ in range(max_tokens):
            if temperature == 0:
                z = logits(prev)
                tok = z.index(max(z))
            else:
                weights = [math.exp(processed_logprob(prev, v, temperature)) for v in range(len(VOCAB))]
                tok = rng.choices(range(len(VOCAB)), weights)[0]
            toks.append(tok)
            lps.append(processed_logprob(prev, tok, temperature))
            prev = tok
            if tok == EOS:
                finish = "stop"
                break
            text += VOCAB[tok]
            hit = next((s for s in stops if s in text), None)
            if hit is not None:  # vLLM cuts the text before the stop string; the token stays
                text, finish, stop_reason = text[: text.index(hit)], "stop", hit
                break
        names = [f"token_id:{t}" if as_ids else VOCAB[t] for t in toks]
        offsets = [sum(len(VOCAB[t]) for t in toks[:k]) for k in range(len(toks))]
        logprobs = {
            "text_offset": offsets,
            "token_logprobs": lps,
            "tokens": names,
            "top_logprobs": [{name: lp} for name, lp in zip(names, lps, strict=True)],
        } if want_lp else None
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish,
                "stop_reason": stop_reason, "prompt_logprobs": None}
