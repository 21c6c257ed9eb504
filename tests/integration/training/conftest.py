"""The `jobs` fixture: start whole training jobs and kill whatever is left when the test ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rljob_helpers import Job


@pytest.fixture
def jobs() -> Iterator[Callable[[list[str], Path], Job]]:
    started: list[Job] = []

    def start(argv: list[str], log: Path) -> Job:
        job = Job(argv, log)
        started.append(job)
        return job

    yield start
    for job in started:  # never leave processes behind, even when the test failed
        job.kill()
