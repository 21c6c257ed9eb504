"""Trainer process (one per rank).

    python -m training.trainer --run-dir RUN_DIR [--resume-step N]

Rank and world come from RANK/WORLD_SIZE (torchrun, the local launcher) or SLURM_PROCID/
SLURM_NTASKS (srun); MASTER_ADDR/MASTER_PORT from the environment. On CPU the ranks all-reduce
gradients over gloo; on GPU they shard the model with FSDP over NCCL. Step s consumes
rollouts/step_s and publishes weights/step_{s+1} (policy version s+1).
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from training.common import set_threads
from training.config import JobConfig, load_config
from training.fsutil import COMMITTED, wait_for
from training.metrics import Metrics
from training.rundir import RunDir
from training.trainer import build, checkpoint
from training.trainer.build import dist_env, finish
from training.trainer.step import accumulate

log = logging.getLogger("trainer")


class Trainer:
    def __init__(
        self,
        run: RunDir,
        cfg: JobConfig,
        rank: int,
        world: int,
        resume_step: int | None = None,
        fsdp: bool | None = None,
    ) -> None:
        """`fsdp` None follows trainer.fsdp (sharded on GPU with world > 1 by default); True also
        shards on CPU over gloo (the resharding tests)."""
        self.run, self.cfg, self.rank, self.world = run, cfg, rank, world
        tc = cfg.trainer
        where = build.place(cfg, rank, world, fsdp)
        self.cuda, self.device, self.fsdp = where.cuda, where.device, where.fsdp
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        # Parameters start on the meta device and get memory only for this rank's shards.
        initial = run.initial_model(cfg)
        self.model = build.build(cfg, initial, where)
        self.model.train()
        self.opt, self.sched = build.optimizer(
            self.model, cfg, lr=tc.lr, weight_decay=tc.weight_decay, warmup=tc.warmup_steps, total=tc.steps,
            schedule=tc.lr_schedule, floor=tc.min_lr_ratio,
        )
        self.step = 0
        self.stop_requested = False
        if resume_step:
            self.load_checkpoint(resume_step)
        else:
            checkpoint.load_initial_weights(self.model, initial, tc.master_dtype)

    # -- state (training/trainer/checkpoint.py) --------------------------------------------------
    def save_checkpoint(self) -> None:
        checkpoint.save_checkpoint(self.run, self.model, self.opt, self.sched, self.step)

    def load_checkpoint(self, step: int) -> None:
        self.step = checkpoint.load_checkpoint(self.run, step, self.model, self.opt, self.sched)

    def publish_weights(self) -> float:
        t0 = time.perf_counter()
        checkpoint.publish_weights(self.run, self.cfg, self.model, self.step, self.rank)
        return time.perf_counter() - t0

    # -- one step -------------------------------------------------------------------------------
    def train_step(self, batch: dict[str, Any]) -> dict[str, float]:
        tc = self.cfg.trainer
        self.opt.zero_grad(set_to_none=True)
        st = accumulate(
            self.model,
            batch["micro_batches"],
            int(batch["loss_tokens"]),
            world=self.world,
            fsdp=self.fsdp,
            device=self.device,
            temperature=self.cfg.inference.temperature,
            ratio_low=tc.mask_ratio_low,
            ratio_high=tc.mask_ratio_high,
            chunk_tokens=tc.logprob_chunk_tokens,
        )
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.max_grad_norm)
        self.opt.step()
        self.sched.step()
        self.step += 1
        tokens = st.loss_tokens
        return {
            "loss": st.loss,
            "grad_norm": float(gnorm),
            "mismatch_kl": st.mismatch_kl_sum / max(tokens, 1.0),
            "masked_fraction": st.masked / max(tokens, 1.0),
            "loss_tokens": tokens,
            "rank_tokens": st.rank_tokens,
            "padding_fraction": st.padding_fraction,
            "micro_batches": st.micro_batches,
            "lr": float(self.sched.get_last_lr()[0]),
        }

    def checkpoint_requested(self) -> bool:
        """SIGUSR1 (Slurm's warning before the time limit) on any rank: all ranks agree to stop."""
        flag = torch.tensor([1.0 if self.stop_requested else 0.0])
        if self.world > 1:
            flag = flag.to(self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def checkpoint_and_stop(self) -> None:
        """Checkpoint now and ask the orchestrator for its state at the same step, so that the
        next attempt resumes here rather than at the last periodic checkpoint."""
        if not (self.run.step(self.run.ckpt("trainer"), self.step) / COMMITTED).exists():
            self.save_checkpoint()
        if self.rank == 0:
            self.run.checkpoint_requests.mkdir(parents=True, exist_ok=True)
            (self.run.checkpoint_requests / f"step_{self.step}").touch()
            orch = self.run.step(self.run.ckpt("orchestrator"), self.step)
            try:
                wait_for(orch, COMMITTED, timeout=60)
                log.info("stopping at step %d with trainer and orchestrator checkpoints", self.step)
            except TimeoutError:
                log.warning("orchestrator did not checkpoint step %d; resume uses an earlier step", self.step)

    def run_loop(self, metrics: Metrics | None) -> None:
        tc = self.cfg.trainer
        while self.step < tc.steps:
            if self.checkpoint_requested():
                self.checkpoint_and_stop()
                return
            t0 = time.perf_counter()
            path = wait_for(self.run.step(self.run.rollouts, self.step), timeout=tc.rollout_wait_s)
            batch = torch.load(path / f"rank_{self.rank}.pt", weights_only=True)
            t1 = time.perf_counter()
            rec = self.train_step(batch)
            t2 = time.perf_counter()
            publish_s = self.publish_weights()
            # The step's metrics line before its checkpoint: once the checkpoint commits, a resume
            # starts after this step and would never write the line a kill here had lost.
            if metrics is not None:
                metrics.log(
                    {
                        "step": self.step - 1,
                        **{k: round(v, 6) for k, v in rec.items()},
                        "tokens_per_s": rec["rank_tokens"] * self.world / max(t2 - t1, 1e-9),
                        "step_time": time.perf_counter() - t0,
                        "wait_time": t1 - t0,
                        "weight_publish_time": publish_s,
                    }
                )
            if self.step % tc.checkpoint_every == 0 and self.step < tc.steps:
                self.save_checkpoint()
            log.info("step %d loss %.4f grad_norm %.3f", self.step - 1, rec["loss"], rec["grad_norm"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="training.trainer")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--resume-step", type=int, default=None)
    args = ap.parse_args(argv)
    rank, world = dist_env()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s trainer[{rank}] %(levelname)s %(message)s")
    run = RunDir(Path(args.run_dir))
    cfg = load_config(args.config or run.config)
    if world != cfg.trainer.world_size:
        raise SystemExit(
            f"training.trainer: WORLD_SIZE={world} but trainer.world_size={cfg.trainer.world_size}"
        )
    set_threads(cfg.trainer.threads)
    trainer = Trainer(run, cfg, rank, world, resume_step=args.resume_step)

    def on_usr1(*_: object) -> None:
        trainer.stop_requested = True

    signal.signal(signal.SIGUSR1, on_usr1)
    if args.resume_step:
        log.info("resumed at step %d", trainer.step)
    metrics = None
    if rank == 0:
        metrics = Metrics(
            run, "trainer", port=cfg.metrics.port if cfg.metrics.enabled else None, host=cfg.metrics.host
        )
    trainer.run_loop(metrics)
    log.info("done at step %d", trainer.step)
    finish(world, metrics)


if __name__ == "__main__":
    main()
