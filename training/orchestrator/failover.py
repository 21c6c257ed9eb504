"""Rollout requests that survive a slow or restarting inference replica.

A transport failure (no answer: refused, reset, timed out) or a 502/503/504 (a proxy or a server
still loading) is retried on the same replica with exponential backoff, then sent to each other
replica in turn; the same seed goes with it, so the built-in engine's answer does not depend on
which replica gave it. Anything else (a 4xx, a malformed answer, a cancellation) is not transient
and is raised at once. The scheduler keeps counting the request against the replica it chose: its
load view is off for as long as the failover lasts, which only moves where the next groups go.
"""

from __future__ import annotations

import logging
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


def call_with_failover(
    call: Callable[[int], T], first: int, replicas: int, attempts: int, backoff_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call(replica)`, tried `attempts` times on each replica (backoff_s, then doubling, at most
    MAX_BACKOFF_S between tries) while it fails transiently; the last transient error is raised
    once every replica has failed."""
    last: ServerError | None = None
    for replica in replica_order(first, replicas):
        retrying = Retrying(
            retry=retry_if_exception(transient),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=backoff_s, max=MAX_BACKOFF_S),
            reraise=True,
            sleep=sleep,
        )
        try:
            return retrying(call, replica)
        except ServerError as exc:
            if not transient(exc):
                raise
            last = exc
            if replicas > 1:
                log.warning("replica %d failed %d time(s), last: %s; trying the next", replica, attempts, exc)
    assert last is not None
    raise last
