"""One trainer rank on the run directory's pre-made rollouts, FSDP2-sharded on CPU when asked.

    python reshard_driver.py RUN_DIR [--resume-step N] [--fsdp] [--publish-only]

--publish-only builds the trainer (which loads the initial weights, or the checkpoint), publishes
weights/step_<step> and exits without training.

Rank and world come from RANK/WORLD_SIZE, the rendezvous from MASTER_ADDR/MASTER_PORT (the test
sets them, as torchrun would). The production entry point shards only on GPU; this one uses the
same Trainer with `fsdp=True` so resharding is exercised with gloo on CPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from training.common import set_threads
from training.config import load_config
from training.metrics import Metrics
from training.rundir import RunDir
from training.trainer.__main__ import Trainer
from training.trainer.build import dist_env, finish


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--resume-step", type=int, default=None)
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--publish-only", action="store_true")
    args = ap.parse_args()
    rank, world = dist_env()
    run = RunDir(Path(args.run_dir))
    cfg = load_config(run.config)
    set_threads(1)
    trainer = Trainer(run, cfg, rank, world, resume_step=args.resume_step, fsdp=args.fsdp)
    metrics = Metrics(run, "trainer", port=None) if rank == 0 and not args.publish_only else None
    if args.publish_only:
        trainer.publish_weights()
    else:
        trainer.run_loop(metrics)
    finish(world, metrics)  # the trainer's own exit path: clean teardown, exit 0


if __name__ == "__main__":
    main()
