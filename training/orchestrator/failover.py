"""Rollout requests that survive a slow, restarting or dead inference replica.

A transport failure (no answer: refused, reset, timed out) or a 502/503/504 (a proxy or a server
still loading) is retried on the same replica with exponential backoff, then sent to each other
replica in turn; the same seed goes with it, so the built-in engine's answer does not depend on
which replica gave it. Anything else (a 4xx, a malformed answer, a cancellation) is not transient
and is raised at once.

A replica that failed every try is marked down (`Replicas`): for `cooldown_s` later requests try
it only after every other replica, so one dead server costs one request its retries, not every
request. Once the cooldown has passed it is tried in turn again, once per request until it
answers; a replica that was down is marked stale,
and the orchestrator reads its address again and loads the current policy into it before it takes
a request (it may have restarted on another port, with the starting weights). When every replica
fails, the request waits for one to come back, for at most `wait_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from training.inference.client import ServerError

log = logging.getLogger("orchestrator")
T = TypeVar("T")

TRANSIENT_STATUS = frozenset({502, 503, 504})
MAX_BACKOFF_S = 10.0


def transient(exc: BaseException) -> bool:
    """A failure another try (here or on another replica) may not have."""
    return isinstance(exc, ServerError) and (exc.status is None or exc.status in TRANSIENT_STATUS)


def replica_order(first: int, replicas: int) -> list[int]:
    """The scheduler's choice first, then the others in ring order from it."""
    return [(first + k) % replicas for k in range(replicas)]


class Replicas:
    """Which replicas answered last time, shared by the orchestrator's request threads."""

    def __init__(self, count: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.count = count
        self.cooldown_s = cooldown_s
        self.clock = clock
        self._lock = threading.Lock()
        self._down_until: dict[int, float] = {}  # replica -> when it is tried in turn again
        self._stale: set[int] = set()  # failed since its weights were last loaded

    def order(self, first: int) -> list[int]:
        """Ring order from `first`, replicas in their cooldown moved to the end (last resort)."""
        now = self.clock()
        with self._lock:
            ring = replica_order(first, self.count)
            cooling = [r for r in ring if self._down_until.get(r, 0.0) > now]
        return [r for r in ring if r not in cooling] + cooling

    def failed(self, replica: int) -> None:
        with self._lock:
            newly = replica not in self._down_until
            self._down_until[replica] = self.clock() + self.cooldown_s
            self._stale.add(replica)
        if newly:
            log.warning("replica %d is down; it is tried last for %.0f s at a time", replica, self.cooldown_s)

    def answered(self, replica: int) -> None:
        with self._lock:
            was_down = self._down_until.pop(replica, None) is not None
        if was_down:
            log.info("replica %d answers again and rejoins", replica)

    def down(self) -> list[int]:
        with self._lock:
            return sorted(self._down_until)

    def stale(self, replica: int) -> bool:
        """Failed since its weights were last loaded: it may have restarted with other weights."""
        with self._lock:
            return replica in self._stale

    def synced(self, replica: int) -> None:
        with self._lock:
            self._stale.discard(replica)

    def next_try_in(self) -> float:
        """Seconds until the first cooldown ends (0 when none is running)."""
        now = self.clock()
        with self._lock:
            return max(0.0, min(self._down_until.values(), default=now) - now)


def call_with_failover(
    call: Callable[[int], T], first: int, replicas: Replicas, attempts: int, backoff_s: float,
    wait_s: float = 0.0, sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call(replica)`, tried `attempts` times on each replica (backoff_s, then doubling, at most
    MAX_BACKOFF_S between tries) while it fails transiently; once every replica has failed, again
    after the first cooldown ends, until `wait_s` has passed; then the last transient error is
    raised."""
    deadline = replicas.clock() + wait_s
    waiting = False
    while True:
        last = _one_round(call, first, replicas, attempts, backoff_s, sleep)
        if not isinstance(last, ServerError):
            return last
        remaining = deadline - replicas.clock()
        if remaining <= 0:
            raise last
        if not waiting:
            log.warning("every replica failed, last: %s; waiting up to %.0f s for one to come back",
                        last, remaining)
            waiting = True
        sleep(min(remaining, max(replicas.next_try_in(), backoff_s, 0.1)))


def _one_round(
    call: Callable[[int], T], first: int, replicas: Replicas, attempts: int, backoff_s: float,
    sleep: Callable[[float], None],
) -> T | ServerError:
    """The result from the first replica that answers, or the last transient error."""
    last: ServerError | None = None
    down = set(replicas.down())
    for replica in replicas.order(first):
        retrying = Retrying(
            retry=retry_if_exception(transient),
            # a replica already down is probed once: its retries were spent when it went down
            stop=stop_after_attempt(1 if replica in down else attempts),
            wait=wait_exponential(multiplier=backoff_s, max=MAX_BACKOFF_S),
            reraise=True,
            sleep=sleep,
        )
        try:
            result = retrying(call, replica)
        except ServerError as exc:
            if not transient(exc):
                raise
            last = exc
            replicas.failed(replica)
            if replicas.count > 1 and replica not in down:
                log.warning("replica %d failed %d time(s), last: %s; trying the next", replica, attempts, exc)
            continue
        replicas.answered(replica)
        return result
    assert last is not None
    return last
