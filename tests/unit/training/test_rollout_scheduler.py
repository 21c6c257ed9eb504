"""The rollout scheduler against real built-in inference servers over HTTP on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from safetensors.torch import save_file

from training.fsutil import publish_dir
from training.inference.client import CancelHandle, Completion, OpenAICompatClient, RequestCancelled
from training.inference.engine import Engine
from training.inference.server import InferenceServer
from training.model import load_model
from training.orchestrator.batch import Rollout, RolloutGroup, TaskSampler
from training.orchestrator.scheduler import GroupFilter, RolloutScheduler
from training.tokenizer import load_tokenizer

GROUP = 2


@pytest.fixture
def weights(tiny_model_dir: Path, tmp_path: Path) -> Callable[[int], str]:
    """Publishes the model as policy version v (a committed weights/step_v) and returns its path."""
    sd = {k: v.contiguous() for k, v in load_model(tiny_model_dir).state_dict().items()}

    def publish(v: int) -> str:
        path = tmp_path / "weights" / f"step_{v}"
        return str(publish_dir(path, lambda d: save_file(sd, str(d / "model.safetensors"))))

    return publish


@pytest.fixture
def servers(tiny_model_dir: Path) -> Iterator[list[InferenceServer]]:
    tok = load_tokenizer(tiny_model_dir)
    servers = []
    for _ in range(2):
        eng = Engine(load_model(tiny_model_dir), tok.pad_token_id, set(), 64)  # length stops only
        srv = InferenceServer(eng, tok, "tiny", "127.0.0.1", 0)
        srv.start()
        servers.append(srv)
    yield servers
    for s in servers:
        s.shutdown()


@pytest.fixture
def clients(servers: list[InferenceServer]) -> list[OpenAICompatClient]:
    cs = [OpenAICompatClient(f"http://127.0.0.1:{s.port}") for s in servers]
    for c in cs:
        c.wait_ready(10)
    return cs


class Harness:
    """Requests go to the real servers; `gates` hold chosen tasks back before their request is sent
    (a slow group whose end the test decides), `long` gives chosen tasks a long completion, and
    per-server concurrency and each request's outcome ("ok" or the exception's name) are recorded."""

    def __init__(self, clients: list[OpenAICompatClient], rewards: Callable[[int], list[float]]) -> None:
        self.clients, self.rewards = clients, rewards
        self.gates: dict[int, threading.Event] = {}
        self.long: dict[int, int] = {}  # task -> max_tokens of its first request
        self.self_abort: set[int] = set()  # tasks whose request aborts itself, unasked
        self.lock = threading.Lock()
        self.now = [0] * len(clients)
        self.peak = [0] * len(clients)
        self.requests: list[tuple[int, list[int]]] = []
        self.outcomes: list[tuple[list[int], str]] = []

    def request(
        self, server: int, tasks: list[int], seed: int, cancel: CancelHandle
    ) -> list[list[Completion]]:
        with self.lock:
            self.now[server] += 1
            self.peak[server] = max(self.peak[server], self.now[server])
            self.requests.append((server, list(tasks)))
        outcome = "ok"
        try:
            for t in tasks:
                gate = self.gates.pop(t, None)  # only the task's first request is held back
                if gate is not None:
                    assert gate.wait(30)
            max_tokens = max([self.long.pop(t, 3) for t in tasks])
            if self.self_abort & set(tasks):
                cancel.cancel()
            prompts = [[1, 5 + t % 10, 40, 45] for t in tasks]
            return self.clients[server].complete(prompts, GROUP, max_tokens, 1.0, seed, cancel=cancel)
        except BaseException as exc:
            outcome = type(exc).__name__
            raise
        finally:
            with self.lock:
                self.now[server] -= 1
                self.outcomes.append((list(tasks), outcome))

    def score(self, task: int, comps: list[Completion], version: int) -> RolloutGroup:
        rollouts = [
            Rollout([1], c.tokens, c.logprobs, r, c.versions[0] if c.versions else version)
            for c, r in zip(comps, self.rewards(task), strict=True)
        ]
        return RolloutGroup(f"t{task}", task, rollouts)


def push(sched: RolloutScheduler, h: Harness, weights: Callable[[int], str], v: int) -> None:
    """What the orchestrator's weight watcher does: every server loads version v, then the
    scheduler hears of it."""
    path = weights(v)
    for c in h.clients:
        c.update_weights(path, v)
    sched.on_weights(v)


def varied(task: int) -> list[float]:
    return [0.0, 1.0]


def make(
    h: Harness, *, continuous: bool, per_server: int = 2, batch_groups: int = 4, **kw: object
) -> tuple[RolloutScheduler, threading.Thread]:
    sched = RolloutScheduler(
        servers=len(h.clients),
        sampler=TaskSampler(1000, seed=3),
        request=h.request,
        score=h.score,
        batch_groups=batch_groups,
        continuous=continuous,
        per_server=per_server,
        **kw,  # type: ignore[arg-type]
    )
    th = threading.Thread(target=sched.run, daemon=True)
    th.start()
    return sched, th


def wait_for(cond: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_continuous_refills_each_server_without_waiting_for_the_slowest(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    h = Harness(clients, varied)
    first = TaskSampler(1000, seed=3).draw(1)[0]
    gate = h.gates[first] = threading.Event()  # the first group drawn is a long one
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=4)
    # Batch 0 fills from the groups drawn after the long one: its slot's neighbours were refilled.
    groups, lags, dropped = sched.take_batch(0)
    assert first not in [g.task_index for g in groups] and len(groups) == 4
    assert lags == [0] * 4 and dropped == 0
    # Policy 0 may run one batch ahead (async_level=1), no further: 2 batches buffered or in flight.
    wait_for(lambda: sched.live_groups() + len(sched.buffer) == 4)
    time.sleep(0.3)
    assert sched.live_groups() + len(sched.buffer) == 4
    assert max(h.peak) == 2 and all(p <= 2 for p in h.peak)  # per-server bound, and reached
    assert all(len(tasks) == 1 for _, tasks in h.requests)  # one request per group
    gate.set()
    groups1, lags1, _ = sched.take_batch(1)
    assert first in [g.task_index for g in groups1] and max(lags1) == 1
    # Nothing for batch 2 until policy 1 is loaded; then the producer resumes.
    time.sleep(0.3)
    assert sched.live_groups() == len(sched.buffer) == 0
    push(sched, h, weights, 1)
    groups2, lags2, _ = sched.take_batch(2)
    assert {g.start_version for g in groups2} == {1} and lags2 == [1] * 4
    assert sched.idle_seconds() > 0
    sched.stop()
    th.join(10)
    assert not th.is_alive() and sched.stats.cancelled == 0


def test_in_flight_groups_that_would_arrive_too_stale_are_cancelled(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    h = Harness(clients, varied)
    slow = TaskSampler(1000, seed=3).draw(1)[0]
    gate = h.gates[slow] = threading.Event()
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=1, batch_groups=2)
    sched.take_batch(0)
    assert sched.stats.cancelled == 0  # policy 0 may still land in batch 1
    push(sched, h, weights, 1)
    sched.take_batch(1)
    # Batch 1 is gone, so the slow group (policy 0) can only land in batch 2 or later: lag > 1.
    assert sched.stats.cancelled == 1
    assert slow not in [t for t in sched.pending_tasks()[: len(sched.buffer)]]
    # Its task went back to the sampler, first in line, and is requested again on policy 1 (the
    # gate holds only a task's first request). Batch 2 does not wait for the abandoned request,
    # which is still held back. Whether the new request beats the groups already in flight into
    # batch 2 is timing (when it does not, it is too stale for batch 3 and cancelled in turn), so
    # only the re-request and the lag bound are asserted.
    wait_for(lambda: [t for _, tasks in h.requests for t in tasks].count(slow) >= 2)
    push(sched, h, weights, 2)
    groups, lags, _ = sched.take_batch(2)
    assert not gate.is_set()
    assert all(g.start_version == 1 for g in groups if g.task_index == slow)
    assert max(lags) <= 1
    gate.set()  # the cancelled request goes on: its handle is already cancelled, so it is not sent
    wait_for(lambda: sum(h.now) == 0)
    time.sleep(0.1)
    assert ([slow], RequestCancelled.__name__) in h.outcomes
    assert all(g.start_version >= 1 for g in sched.buffer)
    assert sched.error is None and sched.stats.cancelled >= 1
    sched.stop()
    th.join(10)


def test_a_cancelled_group_is_aborted_on_its_server(
    servers: list[InferenceServer], clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    # As above, but the slow group is a real long completion on the server, not a gate before it.
    long = 20_000
    h = Harness(clients, varied)
    slow = TaskSampler(1000, seed=3).draw(1)[0]
    h.long[slow] = long
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=1, batch_groups=2)
    sched.take_batch(0)
    # The server is generating the slow group: the other groups (3 tokens x 2) and the admission
    # bound (4 groups) leave far fewer tokens than this.
    wait_for(lambda: sum(s.engine.tokens_generated for s in servers) >= 200)
    push(sched, h, weights, 1)
    sched.take_batch(1)
    assert sched.stats.cancelled == 1
    push(sched, h, weights, 2)
    _, lags, _ = sched.take_batch(2)
    assert max(lags) <= 1
    # The abort freed the request and its server: everything returns and no server keeps generating
    # the abandoned group to its end (20000 tokens, far more than every other request's together).
    wait_for(lambda: sum(h.now) == 0)
    wait_for(lambda: all(s.engine.in_flight() == 0 for s in servers))
    assert ([slow], RequestCancelled.__name__) in h.outcomes
    assert sum(s.engine.tokens_generated for s in servers) < long
    # Servers count the aborts they saw; a short group cancelled at batch 2 may have been answered
    # before its abort reached the server.
    metric = "opsctl_inference_requests_aborted_total"
    aborted = sum(s.registry.get_sample_value(metric) or 0 for s in servers)
    cancelled_requests = sum(1 for _, outcome in h.outcomes if outcome == RequestCancelled.__name__)
    assert 1 <= aborted <= cancelled_requests <= sched.stats.cancelled
    assert slow in [t for _, tasks in h.requests[1:] for t in tasks]  # requested again
    assert sched.error is None
    sched.stop()
    th.join(10)


def test_an_abort_the_scheduler_did_not_ask_for_is_an_error(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    h = Harness(clients, varied)
    h.self_abort.add(TaskSampler(1000, seed=3).draw(1)[0])
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=4)
    with pytest.raises(RuntimeError, match="rollout scheduling failed") as exc:
        sched.take_batch(0)
    assert "aborted without being cancelled" in str(exc.value.__cause__)
    sched.stop()
    th.join(10)


def test_groups_that_can_still_arrive_in_time_are_kept(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    h = Harness(clients, varied)
    slow = TaskSampler(1000, seed=3).draw(1)[0]
    gate = h.gates[slow] = threading.Event()
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=2, batch_groups=2)
    sched.take_batch(0)
    push(sched, h, weights, 1)
    wait_for(lambda: len(sched.buffer) == 3)  # the slow group can still land in batch 2: kept
    assert sched.stats.cancelled == 0 and slow in sched.pending_tasks()
    gate.set()
    taken = sched.take_batch(1)[0] + sched.take_batch(2)[0]
    assert slow in [g.task_index for g in taken] and sched.stats.cancelled == 0
    sched.stop()
    th.join(10)


def test_filters_drop_and_count_groups_and_the_batch_still_fills(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    # Task index mod 4 decides the rewards: all equal (zero advantage), all 1, all 0, or mixed.
    table = {0: [0.5, 0.5], 1: [1.0, 1.0], 2: [0.0, 0.0], 3: [0.0, 1.0]}
    h = Harness(clients, lambda t: table[t % 4])
    flt = GroupFilter(zero_advantage=True, too_easy=1.0, too_hard=0.0)
    sched, th = make(h, continuous=True, async_level=1, max_off_policy_steps=4, group_filter=flt)
    groups, _, _ = sched.take_batch(0)
    assert len(groups) == 4 and all(g.task_index % 4 == 3 for g in groups)
    sched.stop()
    th.join(10)
    # Requests already sent still finish and are filtered after stop(): count once all are back
    # (a ticket goes live before its thread reaches the server, so an earlier tally races).
    wait_for(lambda: sched.live_groups() == 0)
    drawn = [t for _, tasks in h.requests for t in tasks]
    f = sched.stats.filtered
    assert f["zero_advantage"] >= 1 and f["too_easy"] >= 1 and f["too_hard"] >= 1
    # Every group drawn is either buffered, taken or counted by exactly one filter.
    assert sched.stats.cancelled == 0
    assert len(drawn) == sum(f.values()) + len(groups) + len(sched.buffer)


def test_group_filter_reasons() -> None:
    off = GroupFilter()
    assert off.reason([1.0, 1.0]) is None
    f = GroupFilter(zero_advantage=True, too_easy=0.9, too_hard=0.1)
    assert f.reason([1.0, 1.0]) == "too_easy"
    assert f.reason([0.0, 0.0]) == "too_hard"
    assert f.reason([0.5, 0.5]) == "zero_advantage"
    assert f.reason([0.0, 1.0]) is None
    assert GroupFilter(too_easy=0.8).reason([0.5, 1.0]) is None


def test_batch_schedule_waits_for_the_slowest_and_keeps_draw_order(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    h = Harness(clients, varied)
    order = TaskSampler(1000, seed=3).draw(4)
    gate = h.gates[order[0]] = threading.Event()
    sched, th = make(h, continuous=False, async_level=1, max_off_policy_steps=4)
    wait_for(lambda: len(h.requests) == 2)
    time.sleep(0.3)
    assert sched.buffer == []  # the other server finished, but the batch waits for the slowest
    assert sched.pending_tasks() == order
    assert sorted(len(t) for _, t in h.requests) == [2, 2]  # one request per server
    gate.set()
    groups, _, _ = sched.take_batch(0)
    assert [g.task_index for g in groups] == order
    sched.stop()
    th.join(10)


def test_batch_schedule_drops_stale_groups_and_requeues_their_tasks(
    clients: list[OpenAICompatClient], weights: Callable[[int], str]
) -> None:
    # async_level=2 lets policy 0 generate batches 0-2, but batch 2 accepts lag <= 1 only.
    h = Harness(clients, varied)
    sched, th = make(h, continuous=False, async_level=2, max_off_policy_steps=1)
    sched.take_batch(0)
    sched.take_batch(1)
    wait_for(lambda: len(sched.buffer) == 4)
    stale = [g.task_index for g in sched.buffer]
    push(sched, h, weights, 1)
    groups, lags, dropped = sched.take_batch(2)
    assert dropped == 4 == sched.stats.dropped
    assert sorted(g.task_index for g in groups) == sorted(stale) and lags == [1] * 4  # redone on policy 1
    sched.stop()
    th.join(10)
