"""Rollout requests across inference replicas (training/orchestrator/failover.py), over real HTTP
against loopback servers speaking vLLM's API (fake_vllm.py) and a port nothing listens on."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_vllm import FakeVLLM

from training.config import ConfigError, load_config
from training.envs import Environment, Parser, Rubric, Task
from training.envs.base import exact_answer
from training.inference.client import CancelHandle, OpenAICompatClient, RequestCancelled, ServerError
from training.metrics import Metrics
from training.orchestrator.__main__ import Orchestrator
from training.orchestrator.failover import Replicas, call_with_failover, replica_order
from training.rundir import RunDir, free_port

PROMPTS = [[3, 4], [5]]


@pytest.fixture
def replicas() -> Iterator[list[FakeVLLM]]:
    with FakeVLLM("policy") as a, FakeVLLM("policy") as b:
        yield [a, b]


def client(url: str, *overrides: str) -> OpenAICompatClient:
    cfg = load_config(None, ["inference.served_model_name=policy", *overrides])
    return OpenAICompatClient.from_config(url, cfg.inference)


class Clock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def run(clients: list[OpenAICompatClient], first: int = 0, attempts: int = 3,
        cancel: CancelHandle | None = None, pool: Replicas | None = None,
        wait_s: float = 0.0) -> tuple[object, list[float]]:
    pool = pool or Replicas(len(clients), 30.0, Clock())
    clock = pool.clock
    assert isinstance(clock, Clock)
    clock.slept.clear()

    def complete(replica: int) -> object:
        return clients[replica].complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=11, cancel=cancel)

    out = call_with_failover(complete, first, pool, attempts, 0.5, wait_s, sleep=clock.sleep)
    return out, list(clock.slept)


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


def test_a_dead_replica_is_tried_last_until_its_cooldown_ends_then_rejoins(replicas: list[FakeVLLM]) -> None:
    """One dead server costs the first request its retries, not every request: for the cooldown the
    others come first. Once it passes, the replica is tried in turn again and rejoins when it
    answers; until its weights are loaded again (the orchestrator's job) it stays stale."""
    a, b = replicas
    pool = Replicas(2, 30.0, Clock())
    a.fail_next = [503] * 3
    _, slept = run([client(a.url), client(b.url)], pool=pool)
    assert slept == [0.5, 1.0] and (len(a.requests), len(b.requests)) == (3, 1)
    assert pool.down() == [0] and pool.stale(0) and pool.order(0) == [1, 0]

    _, slept = run([client(a.url), client(b.url)], pool=pool)  # straight to b: no retries, no sleep
    assert slept == [] and (len(a.requests), len(b.requests)) == (3, 2)

    assert isinstance(pool.clock, Clock)
    pool.clock.now += 30.0  # the cooldown is over: a is first again, answers and rejoins
    assert pool.order(0) == [0, 1]
    run([client(a.url), client(b.url)], pool=pool)
    assert (len(a.requests), len(b.requests)) == (4, 2) and pool.down() == []
    assert pool.stale(0)  # answered, but not yet given the current weights
    pool.synced(0)
    assert not pool.stale(0)


def test_with_every_replica_down_a_request_waits_for_one_to_come_back(replicas: list[FakeVLLM]) -> None:
    """A single inference server restarting: the request waits (bounded by wait_s) rather than
    failing the job; past wait_s the last error is raised."""
    a, _ = replicas
    a.fail_next = [503] * 4  # a restart: refused for a while, then it answers
    pool = Replicas(1, 5.0, Clock())
    out, slept = run([client(a.url)], attempts=1, pool=pool, wait_s=60.0)
    assert [len(group) for group in out] == [2, 2]  # type: ignore[attr-defined]
    assert slept == [5.0, 5.0, 5.0, 5.0] and len(a.requests) == 5 and pool.down() == []

    a.fail_next = [503] * 100
    with pytest.raises(ServerError) as err:
        run([client(a.url)], attempts=1, pool=pool, wait_s=12.0)
    assert err.value.status == 503 and sum(pool.clock.slept) == pytest.approx(12.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("override", ["orchestrator.request_attempts=0", "orchestrator.request_backoff_s=-1",
                                      "inference.request_timeout_s=0", "trainer.rollout_wait_s=-5",
                                      "orchestrator.replica_cooldown_s=-1", "orchestrator.replica_wait_s=-1"])
def test_bad_retry_settings_name_the_key(override: str) -> None:
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        load_config(None, [override])


def test_a_restarted_replica_is_found_at_its_new_address_and_given_current_weights(tmp_path: Path) -> None:
    """The orchestrator's side of a rejoin: a replica that died misses a weight update (the job goes
    on with the other); restarted, it announces a new port; before its next request it is found
    there and loads the policy the other serves, and then takes requests again."""
    run = RunDir(tmp_path)
    cfg = load_config(None, ["inference.served_model_name=policy", "orchestrator.replica_cooldown_s=0"])
    env = Environment("probe", [Task("t0", "1+1=", "2")], [], Rubric([exact_answer], [1.0]), Parser())
    with FakeVLLM("policy") as a, FakeVLLM("policy") as b:
        run.announce("inference-0", {"url": a.url})
        run.announce("inference-1", {"url": b.url})
        orch = Orchestrator(run, cfg, [client(a.url), client(b.url)], env, None,
                            Metrics(run, "orchestrator", port=None))
        try:
            orch.update_replicas("/w/step_1", 1)
            orch.loaded_version = 1
            assert a.loaded == b.loaded == [("/w/step_1", 1)]
            b.__exit__()  # replica 1 dies
            orch.update_replicas("/w/step_2", 2)  # taken by replica 0; replica 1 marked down
            orch.loaded_version = 2
            assert a.loaded[-1] == ("/w/step_2", 2) and orch.replicas.down() == [1]
            with FakeVLLM("policy") as restarted:  # back, on another port, with its starting weights
                run.announce("inference-1", {"url": restarted.url})

                def complete(replica: int) -> object:
                    return orch.ready(replica).complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=3)

                orch.failover(complete, 1)  # type: ignore[arg-type]
                assert orch.clients[1].base_url == restarted.url
                assert restarted.loaded == [(str(run.step(run.weights, 2)), 2)]
                assert len(restarted.requests) == 1 and orch.replicas.down() == []
                assert not orch.replicas.stale(1)
        finally:
            orch.pool.shutdown()


def test_a_replica_whose_prefix_cache_reset_was_refused_is_reloaded_before_it_serves(tmp_path: Path) -> None:
    """vLLM loaded a version but kept its prefix cache (training/inference/vllm_ext.py answers 503):
    the job goes on; that replica takes no request until a reload and reset succeed."""
    run = RunDir(tmp_path)
    cfg = load_config(None, ["inference.served_model_name=policy", "orchestrator.replica_cooldown_s=0"])
    env = Environment("probe", [Task("t0", "1+1=", "2")], [], Rubric([exact_answer], [1.0]), Parser())
    with FakeVLLM("policy") as a, FakeVLLM("policy") as b:
        orch = Orchestrator(run, cfg, [client(a.url), client(b.url)], env, None,
                            Metrics(run, "orchestrator", port=None))
        try:
            b.fail_updates = [503]
            orch.update_replicas("/w/step_1", 1)  # no exception: the job goes on
            orch.loaded_version = 1
            assert a.loaded == [("/w/step_1", 1)] and b.loaded == [] and orch.replicas.stale(1)

            def complete(replica: int) -> object:
                return orch.ready(replica).complete(PROMPTS, n=2, max_tokens=4, temperature=1.0, seed=3)

            orch.failover(complete, 1)  # type: ignore[arg-type]
            assert b.loaded == [(str(run.step(run.weights, 1)), 1)]  # reloaded first, then served
            assert len(b.requests) == 1 and not orch.replicas.stale(1)
            b.fail_updates = [500]  # anything else the engine fails with still ends the job
            with pytest.raises(ServerError):
                orch.update_replicas("/w/step_2", 2)
        finally:
            orch.pool.shutdown()
