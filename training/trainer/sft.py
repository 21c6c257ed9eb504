"""SFT on a chat dataset, on the RL trainer's machinery: the same sharded model (trainer.* layout:
FSDP/HSDP, dtypes, activation checkpointing, attention), the same packing and micro-batch
accumulation, the same DCP checkpoints, and sft/final published as a model directory by every
rank in parallel.

    [RANK=r WORLD_SIZE=w MASTER_ADDR=.. MASTER_PORT=..] python -m training.sft --run-dir RUN_DIR

(with sft.dataset set; training/sft.py dispatches here). Conversations are rendered by
training/chat.py (chat template, loss on assistant turns only). The conversations of step s are
a function of s and the seed alone, so a run that resumes from checkpoints/sft/step_s trains
exactly what the uninterrupted run would have. SIGUSR1 checkpoints at the next step and exits
EXIT_STOPPED; the next attempt resumes there.
"""

from __future__ import annotations

import functools
import logging
import random
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from training.chat import ChatDataError, load_dataset, render
from training.config import JobConfig
from training.fsutil import COMMITTED, remove_uncommitted, step_dirs
from training.metrics import Metrics
from training.orchestrator.batch import Sample, collate, pack, shard
from training.rundir import RunDir
from training.tokenizer import load_tokenizer
from training.trainer import build, checkpoint
from training.trainer.step import accumulate

log = logging.getLogger("sft")
COMPONENT = "sft"  # checkpoints/sft/step_N
EXIT_STOPPED = 75  # as training.sft: stopped on request; the next attempt resumes


def chat_samples(path: str | Path, tokenizer: Any) -> list[Sample]:
    out = []
    for conv in load_dataset(path):
        for ct in render(tokenizer, conv):
            n = len(ct.input_ids)
            out.append(Sample(ct.input_ids, ct.loss_mask, [0.0] * n, [0.0] * n))
    return out


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"sft:{seed}:{epoch}").shuffle(order)
    return tuple(order)


def step_indices(n: int, step: int, batch_size: int, seed: int) -> list[int]:
    """The samples of step `step`: the next `batch_size` of a seeded shuffle per epoch."""
    return [_epoch_order(n, seed, i // n)[i % n] for i in range(step * batch_size, (step + 1) * batch_size)]


def rank_micro_batches(
    batch: list[Sample], cfg: JobConfig, rank: int, world: int, pad_id: int
) -> tuple[list[dict[str, torch.Tensor]], int]:
    """This rank's share of the packed batch (every rank packs the whole batch the same way and
    takes its slots: equal micro-batch counts) and the batch's trained-token count."""
    mbs = pack(batch, cfg.sft.micro_batch_tokens, cfg.sft.pack_row_tokens)
    return [collate(mb, pad_id) for mb in shard(mbs, world)[rank]], sum(sum(s.loss_mask) for s in batch)


class ChatSFT:
    def __init__(self, run: RunDir, cfg: JobConfig, rank: int, world: int, fsdp: bool | None = None) -> None:
        from training.sft import ensure_base_model

        self.run, self.cfg = run, cfg
        self.where = build.place(cfg, rank, world, fsdp)
        if rank == 0:
            self.base = ensure_base_model(run, cfg)
            remove_uncommitted(run.ckpt(COMPONENT), COMMITTED)  # a killed attempt's half-written step
        else:
            self.base = Path(cfg.model.path) if cfg.model.path else run.base_model
        self._barrier()
        self.tokenizer = load_tokenizer(self.base)
        self.samples = chat_samples(cfg.sft.dataset, self.tokenizer)
        torch.manual_seed(cfg.seed)
        sc = cfg.sft
        self.model = build.build(cfg, self.base, self.where)
        self.model.train()
        self.opt, self.sched = build.optimizer(
            self.model, cfg, lr=sc.lr, weight_decay=sc.weight_decay, warmup=sc.warmup_steps, total=sc.steps,
            schedule=sc.lr_schedule,
        )
        self.step = 0
        self.stop_requested = False
        latest = self._agree(max(step_dirs(run.ckpt(COMPONENT), COMMITTED), default=0))
        if latest:
            self.step = checkpoint.load_checkpoint(run, latest, self.model, self.opt, self.sched, COMPONENT)
            log.info("resumed chat SFT at step %d", self.step)
        else:
            checkpoint.load_initial_weights(self.model, self.base, cfg.trainer.master_dtype)

    def _barrier(self) -> None:
        if self.where.world > 1:
            dist.barrier()

    def _agree(self, value: int) -> int:
        """Rank 0's value on every rank (the ranks list the shared directory at slightly different
        moments)."""
        if self.where.world == 1:
            return value
        box: list[Any] = [value]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])

    def _stop_agreed(self) -> bool:
        flag = torch.tensor([1.0 if self.stop_requested else 0.0])
        if self.where.world > 1:
            flag = flag.to(self.where.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def train_step(self) -> dict[str, float]:
        cfg, where = self.cfg, self.where
        batch = [self.samples[i] for i in step_indices(len(self.samples), self.step, cfg.sft.batch_size,
                                                        cfg.seed)]
        mbs, tokens = rank_micro_batches(batch, cfg, where.rank, where.world, self.tokenizer.pad_token_id)
        self.opt.zero_grad(set_to_none=True)
        st = accumulate(self.model, mbs, tokens, world=where.world, fsdp=where.fsdp, device=where.device,
                        temperature=1.0, ratio_low=0.0, ratio_high=0.0,
                        chunk_tokens=cfg.trainer.logprob_chunk_tokens, objective="sft")
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.trainer.max_grad_norm)
        self.opt.step()
        self.sched.step()
        self.step += 1
        return {"loss": st.loss, "grad_norm": float(gnorm), "loss_tokens": st.loss_tokens,
                "padding_fraction": st.padding_fraction, "lr": float(self.sched.get_last_lr()[0])}

    def save(self) -> None:
        checkpoint.save_checkpoint(self.run, self.model, self.opt, self.sched, self.step, COMPONENT)

    def train(self, metrics: Metrics | None) -> bool:
        """Train to sft.steps and publish sft/final (True), or checkpoint and stop early on request
        (False)."""
        sc = self.cfg.sft
        while self.step < sc.steps:
            if self._stop_agreed():
                if self.step not in step_dirs(self.run.ckpt(COMPONENT), COMMITTED):
                    self.save()
                log.warning("stop requested: checkpointed chat SFT at step %d", self.step)
                return False
            t0 = time.perf_counter()
            rec = self.train_step()
            if metrics is not None:
                rounded = {k: round(v, 6) for k, v in rec.items()}
                metrics.log({"stage": "sft", "step": self.step - 1, **rounded,
                             "step_time": round(time.perf_counter() - t0, 4)})
            if self.step % sc.checkpoint_every == 0 and self.step < sc.steps:
                self.save()
        self.model.eval()
        info = {"steps": self.step, "conversations": len(self.samples), "dataset": sc.dataset}
        checkpoint.publish_model(self.run.sft_final, self.model, self.base, info, self.cfg.model.dtype)
        if self.where.rank == 0:  # sft/final is the resume point from now on
            shutil.rmtree(self.run.ckpt(COMPONENT), ignore_errors=True)
        log.info("chat SFT done: %s", self.run.sft_final)
        return True


def main(run: RunDir, cfg: JobConfig) -> None:
    """One rank of chat SFT (the process exits here)."""
    rank, world = build.dist_env()
    try:
        sft = ChatSFT(run, cfg, rank, world)
    except ChatDataError as exc:
        print(f"training.sft: error: sft.dataset: {exc}", file=sys.stderr)
        sys.exit(2)

    def on_usr1(*_: object) -> None:
        sft.stop_requested = True

    signal.signal(signal.SIGUSR1, on_usr1)
    metrics = Metrics(run, "sft", port=None) if rank == 0 else None
    if not sft.train(metrics):
        if metrics is not None:
            metrics.close()
        sys.exit(EXIT_STOPPED)
    build.finish(world, metrics)
