"""vllm_ext without vLLM: the ASGI middleware driven as vLLM's server drives it, the worker extension
on a real torch model, and the batch script's readiness wait against loopback servers.

What only a GPU with vLLM proves (collective_rpc across tensor-parallel workers, vLLM's own
load_weights) is bench/gpu/check_vllm.py's job.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fake_vllm import FakeVLLM
from safetensors.torch import save_file

from training.fsutil import publish_dir
from training.inference.vllm_ext import UpdateWeightsMiddleware, WeightReloadExtension, main
from training.rundir import RunDir, free_port


class TinyModel(torch.nn.Module):
    """Stands in for a vLLM model: load_weights takes (name, tensor) pairs, as vLLM's models do."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def load_weights(self, weights: Any) -> set[str]:
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            params[name].data.copy_(tensor)
            loaded.add(name)
        return loaded


class Worker(WeightReloadExtension):
    def __init__(self) -> None:
        self.model_runner = SimpleNamespace(model=TinyModel())


class Engine:
    """The engine client surface the middleware uses; collective_rpc runs the method on each worker."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self.calls: list[str] = []

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (),
                             kwargs: dict | None = None) -> list[Any]:
        self.calls.append(method)
        return [getattr(w, method)(*args, **(kwargs or {})) for w in self.workers]

    async def reset_prefix_cache(self) -> None:
        self.calls.append("reset_prefix_cache")


class RefusingEngine(Engine):
    """vLLM's newer client: False while running requests hold cached blocks, unless told to reset
    them too (`refuse_always`: a reset that never happens)."""

    def __init__(self, workers: list[Worker], refuse_always: bool = False) -> None:
        super().__init__(workers)
        self.refuse_always = refuse_always

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:  # type: ignore[override]
        self.calls.append(f"reset_prefix_cache(running={reset_running_requests})")
        return reset_running_requests and not self.refuse_always


def call(mw: UpdateWeightsMiddleware, engine: Engine, method: str, path: str, body: bytes) -> tuple[int, Any]:
    """One HTTP request through the middleware, as Starlette hands it over (scope["app"].state)."""
    sent: list[dict] = []
    chunks = [body[:5], body[5:]]  # a body in two messages, as ASGI servers may deliver it

    async def receive() -> dict:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(msg: dict) -> None:
        sent.append(msg)

    app = SimpleNamespace(state=SimpleNamespace(engine_client=engine))
    scope = {"type": "http", "method": method, "path": path, "app": app}
    asyncio.run(mw(scope, receive, send))
    status = sent[0]["status"]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(payload) if payload else None


def publish_weights(root: Path, step: int, scale: float) -> Path:
    sd = {"proj.weight": torch.full((3, 4), scale), "proj.bias": torch.full((3,), -scale)}
    return publish_dir(root / f"step_{step}", lambda d: save_file(sd, str(d / "model.safetensors")))


def test_update_reloads_every_worker_and_resets_the_prefix_cache(tmp_path: Path) -> None:
    passed: list[str] = []

    async def vllm_app(scope: dict, receive: Any, send: Any) -> None:
        passed.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    workers = [Worker(), Worker()]  # two tensor-parallel ranks
    engine = Engine(workers)
    mw = UpdateWeightsMiddleware(vllm_app)
    wdir = publish_weights(tmp_path, 3, 0.25)
    status, out = call(mw, engine, "POST", "/update_weights",
                       json.dumps({"weight_dir": str(wdir), "version": 3}).encode())
    assert status == 200 and out["version"] == 3 and out["tensors"] == [2, 2]
    assert engine.calls == ["reload_weights", "reset_prefix_cache"]
    for w in workers:
        assert torch.equal(w.model_runner.model.proj.weight, torch.full((3, 4), 0.25))
    assert mw.version == 3
    call(mw, engine, "POST", "/v1/completions", b"{}")  # everything else goes to vLLM
    assert passed == ["/v1/completions"]


def test_a_refused_prefix_cache_reset_is_retried_with_the_running_requests_then_an_error(
    tmp_path: Path,
) -> None:
    wdir = publish_weights(tmp_path, 2, 0.5)
    body = json.dumps({"weight_dir": str(wdir), "version": 2}).encode()
    engine = RefusingEngine([Worker()])
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    status, out = call(mw, engine, "POST", "/update_weights", body)
    assert status == 200 and mw.version == 2
    assert engine.calls == ["reload_weights", "reset_prefix_cache(running=False)",
                            "reset_prefix_cache(running=True)"]
    never = RefusingEngine([Worker()], refuse_always=True)
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    status, out = call(mw, never, "POST", "/update_weights", body)
    # 503: transient for the orchestrator, which reloads this replica before it serves again
    assert status == 503 and "refused to reset its prefix cache" in out["error"]["message"]
    assert mw.version == 0  # the version is not claimed


def test_a_sharded_model_directory_reloads_in_release_names(tmp_path: Path) -> None:
    """What the trainer publishes (training/weights.py): shards and an index; every tensor reaches
    the workers under its checkpoint name."""
    from training.weights import publish_sharded

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama"}')
    sd = {"proj.weight": torch.full((3, 4), 2.0), "proj.bias": torch.full((3,), 1.0)}
    publish_sharded(tmp_path / "step_5", sd, tmp_path / "model", {"version": 5},
                    lambda f, marker, info, fill: publish_dir(f, fill, marker, info))
    engine = Engine([Worker()])
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    status, out = call(mw, engine, "POST", "/update_weights",
                       json.dumps({"weight_dir": str(tmp_path / "step_5"), "version": 5}).encode())
    assert status == 200 and out["tensors"] == [2]
    assert torch.equal(engine.workers[0].model_runner.model.proj.weight, torch.full((3, 4), 2.0))


def test_uncommitted_or_malformed_updates_are_400_in_vllm_error_shape(tmp_path: Path) -> None:
    engine = Engine([Worker()])
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    (tmp_path / "step_4").mkdir()  # no STABLE marker yet: the trainer is still writing
    status, out = call(mw, engine, "POST", "/update_weights",
                       json.dumps({"weight_dir": str(tmp_path / "step_4"), "version": 4}).encode())
    assert status == 400
    assert out == {"error": {"message": f"{tmp_path / 'step_4'} is not a committed weight directory",
                             "type": "BadRequestError", "param": None, "code": 400}}
    status, out = call(mw, engine, "POST", "/update_weights", b'{"weight_dir": 1}')
    assert status == 400 and "weight_dir (string) and version (integer)" in out["error"]["message"]
    status, out = call(mw, engine, "POST", "/update_weights", b"not json")
    assert status == 400 and out["error"]["message"].startswith("invalid JSON")
    assert engine.calls == []


def test_a_failing_reload_is_one_500_line(tmp_path: Path) -> None:
    engine = Engine([Worker()])
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    wdir = publish_dir(tmp_path / "step_1",
                       lambda d: save_file({"nope.weight": torch.ones(2)}, str(d / "model.safetensors")))
    status, out = call(mw, engine, "POST", "/update_weights",
                       json.dumps({"weight_dir": str(wdir), "version": 1}).encode())
    assert status == 500 and out["error"]["message"] == "KeyError: 'nope.weight'"
    assert mw.version == 0


def test_the_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPSCTL_UPDATE_WEIGHTS_PATH", "/rl/weights")
    engine = Engine([Worker()])
    mw = UpdateWeightsMiddleware(lambda *a: None)  # type: ignore[arg-type,return-value]
    wdir = publish_weights(tmp_path, 1, 1.0)
    body = json.dumps({"weight_dir": str(wdir), "version": 1}).encode()
    status, _ = call(mw, engine, "POST", "/rl/weights", body)
    assert status == 200
    status, _ = call(mw, engine, "GET", "/rl/weights", b"")
    assert status == 405


def adjacent_servers(count: int) -> list[FakeVLLM]:
    for _ in range(20):
        base, made = free_port(), []
        try:
            for r in range(count):
                made.append(FakeVLLM(port=base + r))
            return made
        except OSError:  # a neighbouring port is taken: try another base
            for m in made:
                m.httpd.server_close()
    raise RuntimeError("no run of free adjacent ports on loopback")


def test_wait_announces_every_replica_node_major(tmp_path: Path) -> None:
    servers = adjacent_servers(2)  # replicas r = 0, 1 of one node listen on port + r
    with servers[0] as a, servers[1] as b:
        assert main(["wait", "--run-dir", str(tmp_path), "--port", a.url.rsplit(":", 1)[1],
                     "--replicas", "2", "--timeout", "5", "127.0.0.1"]) == 0
    run = RunDir(tmp_path)
    assert [run.discover(f"inference-{k}", 1)["url"] for k in range(2)] == [a.url, b.url]


def test_wait_gives_up_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["wait", "--run-dir", str(tmp_path), "--port", str(port), "--replicas", "1",
                 "--timeout", "0.5", "127.0.0.1", "localhost"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("vllm: 2 of 2 servers not ready after")
    assert not (tmp_path / "peers").exists()


def test_wait_stops_when_a_step_has_exited(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()  # reaped: its pid no longer exists
    t0 = time.monotonic()
    assert main(["wait", "--run-dir", str(tmp_path), "--port", str(free_port()), "--replicas", "1",
                 "--timeout", "60", "--pid", str(done.pid), "127.0.0.1"]) == 1
    assert time.monotonic() - t0 < 10
