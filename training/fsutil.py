"""Atomic publication on a shared filesystem: write to a temp dir, fsync, rename, then a marker.

Readers only trust a directory that holds its marker file (STABLE for weights and rollouts,
COMMITTED for checkpoints), so a crash at any point leaves either the old state or the new one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

STABLE = "STABLE"
COMMITTED = "COMMITTED"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def write_marker(directory: Path, marker: str, info: dict[str, Any] | None = None) -> None:
    tmp = directory / f".{marker}.{uuid.uuid4().hex}"
    with open(tmp, "w") as fh:
        json.dump(info or {}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, directory / marker)
    fsync_dir(directory)


def publish_dir(
    final: Path, fill: Callable[[Path], None], marker: str = STABLE, info: dict[str, Any] | None = None
) -> Path:
    """Create `final` atomically: fill a temp sibling, fsync, rename into place, add the marker."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        fsync_tree(tmp)
        if final.exists():  # an unmarked leftover of a crashed writer: never trusted, replace it
            if (final / marker).exists():
                raise FileExistsError(f"{final} is already committed")
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_marker(final, marker, info)
    return final


def is_committed(path: Path, marker: str = STABLE) -> bool:
    return (path / marker).is_file()


def step_dirs(parent: Path, marker: str = STABLE) -> dict[int, Path]:
    """Committed `step_N` directories under parent, by N."""
    out: dict[int, Path] = {}
    if not parent.is_dir():
        return out
    for p in parent.iterdir():
        if p.name.startswith("step_") and p.name[5:].isdigit() and is_committed(p, marker):
            out[int(p.name[5:])] = p
    return out


def latest_step(parent: Path, marker: str = STABLE) -> int | None:
    steps = step_dirs(parent, marker)
    return max(steps) if steps else None


def wait_for(
    path: Path,
    marker: str = STABLE,
    timeout: float = 3600.0,
    poll: float = 0.02,
    alive: Callable[[], bool] | None = None,
) -> Path:
    """Block until `path` is committed; `alive` lets the caller give up when a peer died."""
    deadline = time.monotonic() + timeout
    while not is_committed(path, marker):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {path / marker}")
        if alive is not None and not alive():
            raise RuntimeError(f"gave up waiting for {path / marker}: a peer stopped")
        time.sleep(poll)
    return path


def remove_uncommitted(parent: Path, marker: str = STABLE) -> None:
    """Drop temp dirs and unmarked step dirs a killed writer left behind."""
    if not parent.is_dir():
        return
    for p in parent.iterdir():
        if p.name.startswith(".tmp-") or (
            p.is_dir() and p.name.startswith("step_") and not is_committed(p, marker)
        ):
            shutil.rmtree(p, ignore_errors=True)
