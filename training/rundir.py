"""The layout of a run directory on the shared filesystem, and peer discovery through it.

config.toml          resolved configuration
metrics.jsonl        one JSON line per component step / event
logs/<proc>.log      per-process logs (written by the launcher)
peers/<name>.json    addresses processes announce (inference server, metrics endpoints)
base_model/          tiny random model when model.path is empty
sft/final/           SFT checkpoint the RL stage starts from (HF format + tokenizer)
weights/step_N/      policy version N for inference (model.safetensors + STABLE)
rollouts/step_N/     trainer batch N (rank_R.pt per trainer rank + STABLE)
checkpoints/{trainer,orchestrator}/step_N/   resumable state (+ COMMITTED)
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.config import JobConfig, load_config


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

    def ckpt(self, component: str) -> Path:
        return self.root / "checkpoints" / component

    def step(self, parent: Path, step: int) -> Path:
        return parent / f"step_{step}"

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

    def initial_model(self, cfg: JobConfig) -> Path:
        """The checkpoint RL starts from: the SFT output when SFT ran, else the configured model."""
        if cfg.sft.enabled:
            return self.sft_final
        return Path(cfg.model.path) if cfg.model.path else self.base_model


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
