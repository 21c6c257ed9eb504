"""Helpers shared by the simulated-hardware integration tests (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """An instant query against the Prometheus at ``url``; the result vector."""
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def eventually(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Wait for Prometheus to scrape (every 5 s) and reflect a change; fail with `what` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(1.0)
    raise AssertionError(f"never happened: {what} (last: {last!r})")
