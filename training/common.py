"""What every entry point shares: argument parsing, config, seeding, torch threads and the
learning-rate schedule."""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import sys
from pathlib import Path

from training.config import ConfigError, JobConfig, load_config
from training.rundir import RunDir


def parse_args(prog: str, argv: list[str] | None = None) -> tuple[RunDir, JobConfig]:
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--run-dir", required=True, help="shared run directory (holds config.toml)")
    ap.add_argument("--config", default=None, help="TOML config (default: RUN_DIR/config.toml)")
    ap.add_argument("-o", "--override", action="append", default=[], help="dotted KEY=VALUE override")
    args = ap.parse_args(argv)
    run = RunDir(Path(args.run_dir))
    try:
        cfg = load_config(args.config or run.config, args.override)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {prog} %(levelname)s %(message)s")
    return run, cfg


def seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def set_threads(n: int) -> None:
    import torch

    # Several processes share few cores: oversubscription costs more than it gains.
    torch.set_num_threads(n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


def lr_factor(step: int, *, warmup: int, total: int, schedule: str, floor: float = 0.0) -> float:
    """The multiple of the peak learning rate for optimizer step `step` (from 0): a linear warmup
    over `warmup` steps, then either constant or a cosine from 1 down to `floor` at step `total`
    (the cosine runs over all `total` steps, warmup included, and stays at `floor` after)."""
    warm = min(1.0, (step + 1) / max(1, warmup))
    if schedule == "constant":
        return warm
    if schedule != "cosine":
        raise ValueError(f"unknown learning-rate schedule {schedule!r}")
    progress = min(1.0, step / max(1, total))
    return warm * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))
