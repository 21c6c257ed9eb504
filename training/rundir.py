"""The layout of a run directory on the shared filesystem, and peer discovery through it.

config.toml          resolved configuration
metrics.jsonl        one JSON line per component step / event
logs/<proc>.log      per-process logs (written by the launcher)
peers/<name>.json    addresses processes announce (inference server, metrics endpoints)
base_model/          tiny random model when model.path is empty
sft/final/           SFT checkpoint the RL stage starts from (HF format + tokenizer)
weights/step_N/      policy version N for inference (a HF model directory + STABLE)
rollouts/step_N/     trainer batch N (rank_R.pt per trainer rank + STABLE)
checkpoints/{trainer,orchestrator}/step_N/   resumable state (+ COMMITTED)
    checkpoint_requests/step_N   the trainer stopping early (SIGUSR1) asks the orchestrator for step N
.discarded/          state moved out of the live tree before it is deleted (see `resume_point`)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.config import JobConfig, load_config
from training.fsutil import COMMITTED, STABLE, remove_uncommitted, step_dirs


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def rollout_samples(self) -> Path:
        return self.root / "rollouts.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def peers(self) -> Path:
        return self.root / "peers"

    @property
    def base_model(self) -> Path:
        return self.root / "base_model"

    @property
    def sft_final(self) -> Path:
        return self.root / "sft" / "final"

    @property
    def weights(self) -> Path:
        return self.root / "weights"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    @property
    def checkpoint_requests(self) -> Path:
        return self.root / "checkpoint_requests"

    def ckpt(self, component: str) -> Path:
        return self.root / "checkpoints" / component

    def step(self, parent: Path, step: int) -> Path:
        return parent / f"step_{step}"

    @property
    def discarded(self) -> Path:
        return self.root / ".discarded"

    def load_config(self) -> JobConfig:
        return load_config(self.config)

    def announce(self, name: str, info: dict[str, Any]) -> None:
        self.peers.mkdir(parents=True, exist_ok=True)
        tmp = self.peers / f".{name}.{os.getpid()}"
        tmp.write_text(json.dumps(info))
        os.rename(tmp, self.peers / f"{name}.json")

    def discover(self, name: str, timeout: float = 300.0) -> dict[str, Any]:
        path = self.peers / f"{name}.json"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no peer {name} announced in {self.peers}")
            time.sleep(0.05)
        return dict(json.loads(path.read_text()))

    def sft_output(self, cfg: JobConfig) -> Path | None:
        """What the SFT stage publishes (STABLE once whole): the SFT checkpoint, or the tiny random
        model RL starts from when SFT is off and model.path is empty; None when it has nothing to do."""
        if cfg.sft.enabled:
            return self.sft_final
        return None if cfg.model.path else self.base_model

    def initial_model(self, cfg: JobConfig) -> Path:
        """The checkpoint RL starts from: the SFT output when SFT ran, else the configured model."""
        if cfg.sft.enabled:
            return self.sft_final
        return Path(cfg.model.path) if cfg.model.path else self.base_model


def discard(run: RunDir, path: Path) -> None:
    """Take a committed directory out of the live tree in one rename, then delete it. Deleting in
    place is not atomic: a kill halfway could leave a marker beside missing files, which readers
    would trust."""
    run.discarded.mkdir(parents=True, exist_ok=True)
    aside = run.discarded / f"{path.parent.name}-{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)
    with contextlib.suppress(OSError):  # still holds another discard's leftovers: kept for now
        run.discarded.rmdir()


def resume_point(run: RunDir) -> int:
    """Where the next attempt starts, and the run directory made to agree with it.

    The resume step is the newest step s with a committed trainer checkpoint, a committed
    orchestrator checkpoint and the weights/step_s the policy resumes from; 0 when there is none
    (including an attempt killed before its first checkpoint). Everything a killed attempt left
    past it is discarded: half-written directories; rollouts/step_t for t >= s (the orchestrator,
    up to async_level steps ahead, regenerates them from its checkpointed sampler); weights and
    checkpoints of steps > s. weights/step_s and every checkpoint at or before s stay.
    """
    kinds = (
        (run.weights, STABLE),
        (run.rollouts, STABLE),
        (run.ckpt("trainer"), COMMITTED),
        (run.ckpt("orchestrator"), COMMITTED),
    )
    shutil.rmtree(run.discarded, ignore_errors=True)  # what a killed cleanup left half-deleted
    for parent, marker in kinds:
        remove_uncommitted(parent, marker)
    for parent in (run.root, run.sft_final.parent):  # temp dirs of a killed SFT / base model write
        remove_uncommitted(parent)
    shutil.rmtree(run.checkpoint_requests, ignore_errors=True)  # served or moot by now
    trainer = step_dirs(run.ckpt("trainer"), COMMITTED)
    orch = step_dirs(run.ckpt("orchestrator"), COMMITTED)
    common = sorted(set(trainer) & set(orch) & set(step_dirs(run.weights)))
    step = common[-1] if common else 0
    for parent, marker in kinds:
        for s, path in step_dirs(parent, marker).items():
            # weights/step_s is the policy the resumed step s starts from; rollouts/step_s is redone.
            if s > step or (parent == run.rollouts and s >= step):
                discard(run, path)
    return step


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
