"""Rollout scheduling: which groups are in flight on which inference server, and when.

Two schedules share one buffer of scored groups, from which the orchestrator takes batches of
`batch_groups`:

- continuous: every group is its own request. Each server holds at most `per_server` live groups
  and gets a new one as soon as one finishes, so a long completion holds back only its own group,
  not a whole batch. When a live group can only land in a batch more than `max_off_policy_steps`
  after the policy it was requested with, it is cancelled: its request is aborted through its
  CancelHandle (the connection is closed; vLLM and the built-in server stop generating for a
  client that disconnected), its result, should one arrive first, is discarded and its task goes
  back to the sampler. Its slot is refilled as soon as the aborted request returns.
  That is checked whenever the earliest batch it can land in moves: at a weight update (policy V
  means batches before V are taken), when a batch is taken and when a group is buffered.
- batch: one request per server per batch, waiting for the slowest completion (the schedule
  before continuous scheduling). Deterministic: task draws, seeds and the engine's batches do not
  depend on timing, which bitwise-exact resume at async_level=0 needs.

Both admit a group for batch t only while the servers hold a policy at least t - async_level and
no more than (async_level + 1) batches are buffered or in flight.
"""

from __future__ import annotations

import statistics
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from training.inference.client import CancelHandle, RequestCancelled
from training.orchestrator.batch import RolloutGroup, TaskSampler, off_policy_lag

# (server index, task indices, seed, cancel handle) -> results per task, in task order: completions
# (training.inference.client.Completion) or a verifiers environment's rollouts (vf_rollouts.VfOutput).
# Raises RequestCancelled when the scheduler aborted the request through the handle.
RequestFn = Callable[[int, list[int], int, CancelHandle], list[list[Any]]]
# (task index, its results, policy version at request time) -> scored group.
ScoreFn = Callable[[int, list[Any], int], RolloutGroup]


@dataclass(frozen=True)
class GroupFilter:
    """Groups not worth training on. Thresholds of None are off."""

    zero_advantage: bool = False
    too_easy: float | None = None  # drop when the mean reward is >= this
    too_hard: float | None = None  # drop when the mean reward is <= this

    def reason(self, rewards: list[float]) -> str | None:
        mean = statistics.fmean(rewards)
        # Easy/hard first: an all-correct group is also zero-advantage, but "too easy" says why.
        if self.too_easy is not None and mean >= self.too_easy:
            return "too_easy"
        if self.too_hard is not None and mean <= self.too_hard:
            return "too_hard"
        if self.zero_advantage and max(rewards) == min(rewards):
            return "zero_advantage"
        return None


@dataclass
class Ticket:
    """One request in flight: a single group (continuous) or a server's share of a batch."""

    seq: int
    server: int
    tasks: list[int]
    target: int  # the batch the groups are meant for
    start_version: int  # policy loaded on the servers when the request was sent
    cancelled: bool = False
    abort: CancelHandle = field(default_factory=CancelHandle)  # aborts the HTTP request


@dataclass
class SchedulerStats:
    cancelled: int = 0
    dropped: int = 0  # finished but too stale when their batch was taken
    filtered: Counter[str] = field(default_factory=Counter)
    idle_s: float = 0.0  # summed over servers: time with no request outstanding


class RolloutScheduler:
    def __init__(
        self,
        *,
        servers: int,
        sampler: TaskSampler,
        request: RequestFn,
        score: ScoreFn,
        batch_groups: int,
        async_level: int,
        max_off_policy_steps: int,
        continuous: bool,
        per_server: int = 0,
        group_filter: GroupFilter | None = None,
        seed: int = 0,
        start_step: int = 0,
        cv: threading.Condition | None = None,
    ) -> None:
        self.servers, self.sampler, self.request, self.score = servers, sampler, request, score
        self.batch_groups, self.async_level = batch_groups, async_level
        self.max_off_policy_steps = max_off_policy_steps
        self.continuous = continuous
        self.per_server = per_server or -(-batch_groups // servers)
        self.filter = group_filter or GroupFilter()
        self.seed = seed
        self.cv = cv or threading.Condition()
        self.buffer: list[RolloutGroup] = []
        self.live: dict[int, Ticket] = {}
        self.taken = start_step  # index of the next batch to take
        self.version = 0
        self.stats = SchedulerStats()
        self.done = False
        self.error: BaseException | None = None
        self._seq = 0
        self._held = 0  # fresh groups take_batch has popped while it waits for the rest
        self._wave: list[int] = []  # batch schedule: the tasks of the batch in flight, in draw order
        # HTTP requests not yet returned per server, cancelled ones included until their abort
        # returns (the server may still be working on them), and since when each server has had none.
        self._outstanding = [0] * servers
        self._idle_since: list[float | None] = [time.perf_counter()] * servers

    # -- state shared with the orchestrator (callers need not hold cv) ----------------------------
    def pending_tasks(self) -> list[int]:
        """Drawn but not yet trained on, oldest first: handed back first on resume."""
        with self.cv:
            live = sorted(self.live.values(), key=lambda t: t.seq)
            in_flight = [i for t in live for i in t.tasks] if self.continuous else list(self._wave)
            return [g.task_index for g in self.buffer] + in_flight

    def live_groups(self) -> int:
        with self.cv:
            return sum(len(t.tasks) for t in self.live.values())

    def idle_seconds(self) -> float:
        """Server-seconds so far with no request outstanding."""
        with self.cv:
            now = time.perf_counter()
            return self.stats.idle_s + sum(now - t for t in self._idle_since if t is not None)

    def on_weights(self, version: int) -> None:
        """Every server now holds `version`: admit groups waiting for it, cancel hopeless ones."""
        with self.cv:
            self.version = version
            self._cancel_stale()
            self.cv.notify_all()

    def stop(self) -> None:
        with self.cv:
            self.done = True
            self.cv.notify_all()

    def take_batch(self, step: int) -> tuple[list[RolloutGroup], list[int], int]:
        """Block until batch_groups fresh groups are buffered; stale ones are dropped and re-queued.
        Returns the groups, their off-policy lags and how many were dropped."""
        used: list[RolloutGroup] = []
        dropped = 0
        with self.cv:
            while len(used) < self.batch_groups:
                if self.error:
                    raise RuntimeError("rollout scheduling failed") from self.error
                if not self.buffer:
                    self.cv.wait(timeout=0.5)
                    continue
                g = self.buffer.pop(0)
                if off_policy_lag(step, g) > self.max_off_policy_steps:
                    self.sampler.give_back([g.task_index])
                    dropped += 1
                else:
                    used.append(g)
                    self._held = len(used)  # still counted as issued while this waits for more
            self.stats.dropped += dropped
            self.taken, self._held = step + 1, 0
            self._cancel_stale()
            self.cv.notify_all()
        return used, [off_policy_lag(step, g) for g in used], dropped

    # -- admission --------------------------------------------------------------------------------
    def _next_target(self) -> int | None:
        """The batch a new group would land in, if one may be requested now (cv held)."""
        issued = self._held + len(self.buffer) + sum(len(t.tasks) for t in self.live.values())
        target = self.taken + issued // self.batch_groups
        if issued >= (self.async_level + 1) * self.batch_groups:
            return None
        # Continuous: never request a group that is bound to be too stale for its batch (it would
        # only be cancelled or dropped, and its task requested again at once).
        ahead = min(self.async_level, self.max_off_policy_steps) if self.continuous else self.async_level
        return target if self.version >= target - ahead else None

    def _cancel_stale(self) -> None:
        """Cancel live groups that can only land in a batch too far ahead of their policy (cv held).
        A group finishing now joins the end of the buffer, so its earliest batch is known."""
        if not self.continuous:
            return
        earliest = max(self._landing_batch(), self.version)
        for t in list(self.live.values()):
            if earliest - t.start_version > self.max_off_policy_steps:
                t.cancelled = True
                t.abort.cancel()  # the server stops generating it; _work sees RequestCancelled
                del self.live[t.seq]
                self.sampler.give_back(t.tasks)
                self.stats.cancelled += len(t.tasks)

    def _landing_batch(self) -> int:
        """The earliest batch a group finishing now can land in: the buffer is consumed in order and
        its stale groups are dropped on the way, as take_batch will (cv held)."""
        batch, fresh = self.taken, self._held
        for g in self.buffer:
            if off_policy_lag(batch, g) <= self.max_off_policy_steps:
                fresh += 1
                if fresh == self.batch_groups:
                    batch, fresh = batch + 1, 0
        return batch

    def _sent(self, server: int) -> None:
        if self._outstanding[server] == 0:
            since = self._idle_since[server]
            if since is not None:
                self.stats.idle_s += time.perf_counter() - since
            self._idle_since[server] = None
        self._outstanding[server] += 1

    def _returned(self, server: int) -> None:
        self._outstanding[server] -= 1
        if self._outstanding[server] == 0:
            self._idle_since[server] = time.perf_counter()

    def fail(self, exc: BaseException) -> None:
        with self.cv:
            self.error = exc
            self.cv.notify_all()

    def _accept(self, groups: list[RolloutGroup], ticket: Ticket) -> None:
        """Filter and buffer finished groups (cv held)."""
        for g in groups:
            g.target, g.start_version = ticket.target, ticket.start_version
            why = self.filter.reason(g.rewards)
            if why is None:
                self.buffer.append(g)
            else:
                self.stats.filtered[why] += 1

    # -- the producer thread ----------------------------------------------------------------------
    def run(self) -> None:
        try:
            if self.continuous:
                self._run_continuous()
            else:
                self._run_batches()
        except BaseException as exc:
            self.fail(exc)
            raise

    def _run_continuous(self) -> None:
        while True:
            with self.cv:
                while True:
                    if self.done or self.error:
                        return
                    # Abandoned requests count too: the server is still generating them.
                    load = self._outstanding
                    server = load.index(min(load))
                    target = self._next_target() if load[server] < self.per_server else None
                    if target is not None:
                        break
                    self.cv.wait(timeout=0.5)
                (task,) = self.sampler.draw(1)
                ticket = Ticket(self._seq, server, [task], target, self.version)
                self._seq += 1
                self.live[ticket.seq] = ticket
                self._sent(server)
            threading.Thread(
                target=self._work, args=(ticket,), name=f"group-{ticket.seq}", daemon=True
            ).start()

    def _work(self, ticket: Ticket) -> None:
        try:
            seed = zlib.crc32(f"{self.seed}:{ticket.target}:{ticket.seq}:{ticket.tasks}".encode())
            comps = self.request(ticket.server, ticket.tasks, seed, ticket.abort)
            groups = [] if ticket.cancelled else self._score(ticket, comps)
        except BaseException as exc:
            with self.cv:
                self._returned(ticket.server)
            # A cancelled ticket's request ends in RequestCancelled (or whatever it met first):
            # its task was already handed back. An abort nobody asked for is a bug, not a result.
            if isinstance(exc, RequestCancelled) and not ticket.cancelled:
                exc = RuntimeError(f"group {ticket.seq}: request aborted without being cancelled: {exc}")
            if not ticket.cancelled:
                self.fail(exc)
            return
        with self.cv:
            self._returned(ticket.server)
            if ticket.cancelled:
                return  # cancelled, but the answer came first: discarded, its task handed back
            del self.live[ticket.seq]
            self._accept(groups, ticket)
            self._cancel_stale()
            self.cv.notify_all()

    def _score(self, ticket: Ticket, comps: list[list[Any]]) -> list[RolloutGroup]:
        return [self.score(i, c, ticket.start_version) for i, c in zip(ticket.tasks, comps, strict=True)]

    def _run_batches(self) -> None:
        with ThreadPoolExecutor(max_workers=self.servers, thread_name_prefix="batch") as pool:
            while True:
                with self.cv:
                    while True:
                        if self.done or self.error:
                            return
                        target = self._next_target()
                        if target is not None:
                            break
                        self.cv.wait(timeout=0.5)
                    indices = self.sampler.draw(self.batch_groups)
                    self._wave = list(indices)
                    seed = zlib.crc32(f"{self.seed}:{target}:{indices}".encode())
                    tickets = [
                        Ticket(self._seq + k, k, indices[k :: self.servers], target, self.version)
                        for k in range(self.servers)
                        if indices[k :: self.servers]
                    ]
                    self._seq += len(tickets)
                    for t in tickets:
                        self.live[t.seq] = t
                        self._sent(t.server)
                # Never cancelled: the batch schedule waits for every request of its batch.
                futures = [
                    pool.submit(self.request, t.server, t.tasks, seed + t.server, t.abort) for t in tickets
                ]
                done: dict[int, list[RolloutGroup]] = {}
                try:
                    for t, fut in zip(tickets, futures, strict=True):
                        done[t.seq] = self._score(t, fut.result())
                finally:
                    with self.cv:
                        for t in tickets:
                            self._returned(t.server)
                # Back to draw order (server k had positions k, k + servers, ...).
                ordered: list[tuple[int, RolloutGroup, Ticket]] = [
                    (t.server + j * self.servers, g, t) for t in tickets for j, g in enumerate(done[t.seq])
                ]
                with self.cv:
                    for t in tickets:
                        del self.live[t.seq]
                    self._wave = []
                    for _pos, g, t in sorted(ordered, key=lambda x: x[0]):
                        self._accept([g], t)
                    self.cv.notify_all()
