"""Client for OpenAI-compatible completion servers: vLLM on GPUs, the built-in server on CPU.

It asks for per-token logprobs and token ids (`return_tokens_as_token_ids`, a vLLM extension) so the
trainer sees exactly the tokens that were sampled, and reloads weights through the server's
weight-update endpoint (`/update_weights` with the committed weight directory, as prime-rl's vLLM
worker extension does; the path is configurable).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential


class ServerError(RuntimeError):
    pass


@dataclass
class Completion:
    tokens: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    # Oldest and newest policy version among the tokens, when the server reports it; else None.
    versions: tuple[int, int] | None


def _parse_token(tok: str) -> int:
    if not tok.startswith("token_id:"):
        raise ServerError(f"expected token ids (return_tokens_as_token_ids), got {tok!r}")
    return int(tok.split(":", 1)[1])


class OpenAICompatClient:
    def __init__(
        self,
        base_url: str,
        model: str = "policy",
        update_weights_path: str = "/update_weights",
        timeout: float = 600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.update_weights_path = update_weights_path
        self.timeout = timeout

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise ServerError(f"{method} {path}: HTTP {exc.code}: {detail}") from None

    def health(self) -> dict[str, Any]:
        return dict(self._request("GET", "/health") or {})

    def wait_ready(self, timeout: float = 300.0) -> None:
        @retry(
            stop=stop_after_delay(timeout),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception_type((urllib.error.URLError, ConnectionError, OSError)),
            reraise=True,
        )
        def ping() -> None:
            # vLLM answers /health with an empty 200; the built-in server with a JSON status.
            self._request("GET", "/health")

        ping()

    def complete(
        self,
        prompts: list[list[int]],
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None = None,
        stop: list[str] | None = None,
    ) -> list[list[Completion]]:
        """One request for all prompts; returns n completions per prompt, in prompt order."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompts,
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        }
        if seed is not None:
            body["seed"] = seed
        if stop:
            body["stop"] = list(stop)  # OpenAI `stop`: the environment's end-of-answer strings
        out = self._request("POST", "/v1/completions", body)
        choices = sorted(out["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts) * n:
            raise ServerError(f"expected {len(prompts) * n} choices, got {len(choices)}")
        comps = []
        for c in choices:
            lp = c.get("logprobs") or {}
            toks = [_parse_token(t) for t in lp.get("tokens", [])]
            lps = [float(x) for x in lp.get("token_logprobs", [])]
            if len(toks) != len(lps):
                raise ServerError("tokens and token_logprobs differ in length")
            pv = c.get("policy_version")
            comps.append(
                Completion(
                    toks,
                    lps,
                    c.get("text", ""),
                    c.get("finish_reason") or "length",
                    (int(pv[0]), int(pv[1])) if pv else None,
                )
            )
        return [comps[i * n : (i + 1) * n] for i in range(len(prompts))]

    def update_weights(self, weight_dir: str, version: int) -> float:
        t0 = time.perf_counter()
        self._request("POST", self.update_weights_path, {"weight_dir": weight_dir, "version": version})
        return time.perf_counter() - t0
