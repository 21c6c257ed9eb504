"""vLLM as the inference backend: in-place weight reloads and the job's readiness wait.

`opsctl launch` (inference.backend = "vllm", inference.urls empty) starts on each inference node

    python -m vllm.entrypoints.openai.api_server --model MODEL --served-model-name NAME \\
        --tensor-parallel-size TP --logprobs-mode processed_logprobs --generation-config vllm \\
        --worker-extension-cls training.inference.vllm_ext.WeightReloadExtension \\
        --middleware training.inference.vllm_ext.UpdateWeightsMiddleware ...

and the same STABLE-marker protocol as the built-in server (training/inference/server.py) applies:
the trainer publishes weights/step_V/ (a model directory, training/weights.py) and then STABLE; the
orchestrator POSTs {"weight_dir", "version"} to /update_weights; the server refuses a directory
without STABLE.

- `UpdateWeightsMiddleware` (a plain ASGI middleware; vLLM's `--middleware` adds a class with
  `app.add_middleware`) answers POST /update_weights (or $OPSCTL_UPDATE_WEIGHTS_PATH) and passes
  every other request to vLLM. It calls `collective_rpc("reload_weights", ...)` on the app's engine
  client, which runs the method below on every tensor-parallel worker between engine steps (running
  requests continue with the new weights), then resets the prefix cache so no new request reuses
  KV computed by the old policy, and checks that vLLM did (`reset_prefix_cache`).
- `WeightReloadExtension` is mixed into each vLLM GPU worker by `--worker-extension-cls`; it streams
  the directory's shards tensor by tensor into `model.load_weights`, which shards each tensor for
  the worker's tensor-parallel rank. The names are the release checkpoint's (per-expert MoE
  weights), the ones vLLM's model loaders map.
- `python -m training.inference.vllm_ext wait ...` runs in the batch script: it waits for GET
  /health of every replica and announces them as peers/inference-<k>.json for the orchestrator.

Nothing here imports vllm: the worker extension and the middleware only use what vLLM hands them,
so this module imports (and its request handling is tested) on machines without vLLM. The reload
itself runs only inside vLLM on a GPU (bench/gpu/check_vllm.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from training.fsutil import STABLE

DEFAULT_PATH = "/update_weights"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BadRequest(ValueError):
    pass


def parse_update_request(raw: bytes) -> tuple[Path, int]:
    """The weight directory and version of an update request; BadRequest unless it is committed."""
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    weight_dir, version = body.get("weight_dir"), body.get("version")
    if not isinstance(weight_dir, str) or not isinstance(version, int) or isinstance(version, bool):
        raise BadRequest("update_weights needs weight_dir (string) and version (integer)")
    path = Path(weight_dir)
    if not (path / STABLE).exists():
        raise BadRequest(f"{weight_dir} is not a committed weight directory")
    from training.weights import WeightsError, weight_files

    try:
        weight_files(path)
    except WeightsError as exc:
        raise BadRequest(f"{weight_dir} is not a committed weight directory: {exc}") from None
    return path, version


def iter_safetensors(weight_dir: str | Path) -> Iterator[tuple[str, Any]]:
    """(name, tensor) pairs read one at a time, so a worker never holds the whole model in memory."""
    from training.weights import iter_checkpoint_tensors

    yield from iter_checkpoint_tensors(Path(weight_dir))


class WeightReloadExtension:
    """Methods vLLM mixes into every GPU worker (`--worker-extension-cls`); called by collective_rpc."""

    model_runner: Any  # provided by vLLM's Worker

    def reload_weights(self, weight_dir: str) -> int:
        """Load a published version into this worker's shard of the model; returns the tensor count."""
        count = 0

        def counted() -> Iterator[tuple[str, Any]]:
            nonlocal count
            for item in iter_safetensors(weight_dir):
                count += 1
                yield item

        self.model_runner.model.load_weights(weights=counted())
        return count


class UpdateWeightsMiddleware:
    """ASGI middleware for vLLM's API server: POST /update_weights reloads weights in place."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.path = os.environ.get("OPSCTL_UPDATE_WEIGHTS_PATH", DEFAULT_PATH)
        self.version = 0
        self._lock: asyncio.Lock | None = None  # created on the server's event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "POST":
            await _send_json(send, 405, _error(f"{self.path} takes POST", "MethodNotAllowed", 405))
            return
        raw = await _read_body(receive)
        try:
            weight_dir, version = parse_update_request(raw)
        except BadRequest as exc:
            await _send_json(send, 400, _error(str(exc), "BadRequestError", 400))
            return
        engine = scope["app"].state.engine_client  # set by vLLM's api_server for every app
        if self._lock is None:
            self._lock = asyncio.Lock()
        try:
            async with self._lock:  # one reload at a time; generation continues between engine steps
                t0 = time.perf_counter()
                counts = await engine.collective_rpc("reload_weights", args=(str(weight_dir),))
                await reset_prefix_cache(engine)
                self.version = version
        except PrefixCacheKept as exc:
            # 503, a transient answer: the orchestrator takes this replica out of rotation and reloads
            # it (and retries the reset) before it serves again, rather than ending the job.
            await _send_json(send, 503, _error(str(exc), "ServiceUnavailableError", 503))
            return
        except Exception as exc:  # the engine's failure, reported to the orchestrator as one line
            await _send_json(send, 500, _error(f"{type(exc).__name__}: {exc}", "InternalServerError", 500))
            return
        await _send_json(
            send, 200, {"version": version, "load_s": time.perf_counter() - t0, "tensors": counts}
        )


class PrefixCacheKept(RuntimeError):
    """vLLM loaded the weights but would not empty its prefix cache."""


async def reset_prefix_cache(engine: Any) -> None:
    """Empty vLLM's prefix cache so no new request reuses KV computed under older weights. vLLM's
    engine client answers False when running requests hold cached blocks; then those are reset too
    (vLLM preempts them and they prefill again under the new weights, as the built-in server's
    in-flight sequences do). Older clients answer None: nothing to check. Raises if refused."""
    done = await engine.reset_prefix_cache()
    if done is False:
        try:
            done = await engine.reset_prefix_cache(reset_running_requests=True)
        except TypeError:  # a client without the option: the refusal stands
            done = False
    if done is False:
        raise PrefixCacheKept("vLLM refused to reset its prefix cache; new requests could reuse KV "
                              "computed under the previous weights")


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    # vLLM's own error shape: {"error": {"message", "type", "param", "code"}}.
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        msg = await receive()
        if msg.get("type") == "http.disconnect":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return b"".join(chunks)


async def _send_json(send: Send, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


# -- the batch script's readiness wait ----------------------------------------------------------
def replica_urls(hosts: list[str], port: int, replicas: int) -> list[str]:
    """Node-major, as srun's block distribution numbers the tasks: task k = node k // R, replica k % R."""
    return [f"http://{h}:{port + r}" for h in hosts for r in range(replicas)]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(urls: list[str], timeout: float, pids: Sequence[int] = (), poll_s: float = 2.0) -> list[str]:
    """Wait until every URL answers GET /health with 200; returns those still not ready (empty: all).
    Gives up early when one of `pids` (the job's srun steps) has exited."""
    pending = list(urls)
    deadline = time.monotonic() + timeout
    while pending:
        pending = [u for u in pending if not _healthy(u)]
        if not pending or time.monotonic() > deadline:
            break
        if not all(_alive(p) for p in pids):
            break  # the servers' (or the trainer's) srun step ended: the attempt is over
        time.sleep(poll_s)
    return pending


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="training.inference.vllm_ext")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait", help="wait for GET /health of every replica, then announce them in peers/")
    w.add_argument("--run-dir", required=True)
    w.add_argument("--port", type=int, required=True, help="port of replica 0; replica r uses port + r")
    w.add_argument("--replicas", type=int, required=True, help="replicas per node")
    w.add_argument("--timeout", type=float, default=1800.0)
    w.add_argument("--pid", type=int, action="append", default=[],
                   help="stop waiting when this process (an srun step) exits; repeatable")
    w.add_argument("hosts", nargs="+")
    args = ap.parse_args(argv)
    from training.rundir import RunDir

    urls = replica_urls(args.hosts, args.port, args.replicas)
    t0 = time.monotonic()
    pending = wait_ready(urls, args.timeout, args.pid)
    if pending:
        more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
        print(f"vllm: {len(pending)} of {len(urls)} servers not ready after {time.monotonic() - t0:.0f}s: "
              f"{', '.join(pending[:3])}{more}", file=sys.stderr)
        return 1
    run = RunDir(Path(args.run_dir))
    for k, url in enumerate(urls):
        run.announce(f"inference-{k}", {"url": url, "backend": "vllm"})
    print(f"vllm: {len(urls)} servers ready after {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
