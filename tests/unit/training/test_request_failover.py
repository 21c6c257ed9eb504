"""Rollout requests across inference replicas (training/orchestrator/failover.py), over real HTTP
against loopback servers speaking vLLM's API (fake_vllm.py) and a port nothing listens on."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from fake_vllm import FakeVLLM

from training.config import ConfigError, load_config
from training.inference.client import CancelHandle, OpenAICompatClient, RequestCancelled, ServerError
from training.orchestrator.failover import call_with_failover, replica_order
from training.rundir import free_port

PROMPTS = [[3, 4], [5]]


@pytest.fixture
def replicas() -> Iterator[list[FakeVLLM]]:
    with FakeVLLM("policy") as a, FakeVLLM("policy") as b:
        yield [a, b]


def client(url: str, *overrides: str) -> OpenAICompatClient:
    cfg = load_config(None, ["inference.served_model_name=policy", *overrides])
    return OpenAICompatClient.from_config(url, cfg.inference)


def run(clients: list[OpenAICompatClient], first: int = 0, attempts: int = 3,
        cancel: CancelHandle | None = None) -> tuple[object, list[float]]:
    slept: list[float] = []

    def complete(replica: int) -> object:
        return clients[replica].complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=11, cancel=cancel)

    return call_with_failover(complete, first, len(clients), attempts, 0.5, sleep=slept.append), slept


def tokens(out: object) -> list[list[list[int]]]:
    return [[c.tokens for c in group] for group in out]  # type: ignore[attr-defined]


def test_a_replica_answering_503_is_retried_with_backoff(replicas: list[FakeVLLM]) -> None:
    a, b = replicas
    a.fail_next = [503, 503]
    out, slept = run([client(a.url), client(b.url)])
    assert len(a.requests) == 3 and not b.requests and slept == [0.5, 1.0]
    assert tokens(out) == tokens(client(b.url).complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=11))


def test_an_unreachable_replica_fails_over_to_the_next_with_the_same_seed(replicas: list[FakeVLLM]) -> None:
    _, b = replicas
    dead = client(f"http://127.0.0.1:{free_port()}")  # nothing listens: connection refused
    out, slept = run([dead, client(b.url)])
    assert slept == [0.5, 1.0] and len(b.requests) == 1 and b.requests[0]["seed"] == 11
    assert [len(group) for group in out] == [2, 2]  # type: ignore[attr-defined]
    assert replica_order(1, 3) == [1, 2, 0]


def test_a_replica_that_never_answers_times_out_and_the_next_answers(replicas: list[FakeVLLM]) -> None:
    _, b = replicas
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        hung = client(f"http://127.0.0.1:{silent.getsockname()[1]}", "inference.request_timeout_s=0.3")
        started = time.monotonic()
        with pytest.raises(ServerError) as err:
            hung.complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=11)
        # the configured 0.3 s, not the default 600 s (a loose bound: the machine may be loaded)
        assert err.value.status is None and time.monotonic() - started < 60
        out, slept = run([hung, client(b.url)], attempts=2)
    assert slept == [0.5] and len(b.requests) == 1 and [len(group) for group in out] == [2, 2]  # type: ignore[attr-defined]


def test_a_client_error_is_raised_at_once_without_failover(replicas: list[FakeVLLM]) -> None:
    a, b = replicas
    a.fail_next = [400]
    with pytest.raises(ServerError) as err:
        run([client(a.url), client(b.url)])
    assert err.value.status == 400 and len(a.requests) == 1 and not b.requests


def test_when_every_replica_fails_the_last_error_is_raised(replicas: list[FakeVLLM]) -> None:
    a, b = replicas
    a.fail_next, b.fail_next = [502] * 2, [504] * 2
    with pytest.raises(ServerError) as err:
        run([client(a.url), client(b.url)], first=1, attempts=2)
    assert err.value.status == 502 and (len(a.requests), len(b.requests)) == (2, 2)


def test_a_cancelled_request_is_not_retried(replicas: list[FakeVLLM]) -> None:
    a, b = replicas
    cancel = CancelHandle()
    cancel.cancel()
    with pytest.raises(RequestCancelled):
        run([client(a.url), client(b.url)], cancel=cancel)
    assert not a.requests and not b.requests


@pytest.mark.parametrize("override", ["orchestrator.request_attempts=0", "orchestrator.request_backoff_s=-1",
                                      "inference.request_timeout_s=0", "trainer.rollout_wait_s=-5"])
def test_bad_retry_settings_name_the_key(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config(None, [override])
