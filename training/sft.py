"""SFT stage: teach the answer format on a few task demonstrations; RL starts from its output.

python -m training.sft --run-dir RUN_DIR

With sft.dataset set, SFT trains on that chat dataset instead, on the sharded trainer, as every
trainer rank (training/trainer/sft.py). Without it, this single process fine-tunes on the
environment's demonstrations (tiny models: the CPU demo and the tests).

SIGUSR1 (Slurm's warning before the time limit) stops SFT at the next step without publishing:
sft/final appears whole or not at all, so the next attempt simply redoes SFT (seeded, same result).
The process then exits with EXIT_STOPPED.
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from training.common import lr_factor, parse_args, seed_all, set_threads
from training.config import JobConfig
from training.envs import Environment, load_environment, prompt_ids
from training.fsutil import STABLE, is_committed, publish_dir
from training.metrics import Metrics
from training.model import create_tiny_model, load_model
from training.rundir import RunDir
from training.tokenizer import load_tokenizer

log = logging.getLogger("sft")

EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped on request before finishing; running it again redoes SFT


class SFTStopped(Exception):
    """SFT was asked to stop (SIGUSR1) before its last step; nothing was published."""

    def __init__(self, step: int, steps: int) -> None:
        super().__init__(f"stopped before SFT step {step} of {steps}")
        self.step, self.steps = step, steps


def ensure_base_model(run: RunDir, cfg: JobConfig) -> Path:
    if cfg.model.path:
        return Path(cfg.model.path)
    if not is_committed(run.base_model):

        def fill(tmp: Path) -> None:
            create_tiny_model(cfg.model, tmp, cfg.seed)

        publish_dir(run.base_model, fill)
    return run.base_model


def demo_batch(env: Environment, tokenizer: object, tasks: list, device: str) -> tuple[torch.Tensor, ...]:
    """Right-padded [bos] prompt answer stop (no bos when the tokenizer has none); the loss mask
    covers the answer and stop only."""
    rows, masks = [], []
    for t in tasks:
        p = prompt_ids(tokenizer, t.prompt)
        a = tokenizer.encode(env.demonstration(t), add_special_tokens=False)  # type: ignore[attr-defined]
        rows.append([*p, *a])
        masks.append([0] * len(p) + [1] * len(a))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id  # type: ignore[attr-defined]
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    loss_mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], device=device, dtype=torch.float32)
    return ids, attn, loss_mask


@torch.no_grad()
def sampled_accuracy(
    model: Any, tokenizer: Any, env: Environment, tasks: list, temperature: float, max_tokens: int, seed: int
) -> float:
    """Mean reward of one completion per task, sampled the way inference will (temperature, token
    budget; greedy at 0), from its own generator so SFT's random state is untouched. A plain
    left-padded decode loop: the budget is a few tokens, so no cache is worth it."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    prompts = [prompt_ids(tokenizer, t.prompt) for t in tasks]
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    for _ in range(max_tokens):
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, -1].float()
        if temperature > 0:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen)
        else:
            nxt = logits.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        attn = torch.cat([attn, torch.ones_like(nxt)], dim=1)
    texts = tokenizer.batch_decode(ids[:, width:].tolist(), skip_special_tokens=True)
    model.train(was_training)
    scores = [env.rubric.score(text, task, env.parser)[0] for text, task in zip(texts, tasks, strict=True)]
    return sum(scores) / len(scores)


def run_sft(run: RunDir, cfg: JobConfig, stop: threading.Event | None = None) -> Path:
    if not cfg.sft.enabled:
        return ensure_base_model(run, cfg)
    if is_committed(run.sft_final):
        log.info("SFT checkpoint %s already committed; skipping", run.sft_final)
        return run.sft_final
    seed_all(cfg.seed)
    base = ensure_base_model(run, cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(base, cfg.model.dtype, device)
    tokenizer = load_tokenizer(base)
    env = load_environment(cfg.env.name, **cfg.env.kwargs)
    rng = random.Random(cfg.seed)
    demos = list(env.dataset)
    rng.shuffle(demos)
    demos = demos[: cfg.sft.num_demos]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft.lr, weight_decay=cfg.sft.weight_decay)
    sc = cfg.sft
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, warmup=sc.warmup_steps, total=sc.steps, schedule=sc.lr_schedule)
    )
    metrics = Metrics(run, "sft", port=None)
    model.train()
    order: list = []
    # Problems for the accuracy target: training problems only (the held-out split stays unseen).
    pool = list(env.dataset)
    check_tasks = random.Random(cfg.seed + 1).sample(pool, min(cfg.sft.check_size, len(pool)))
    steps_done, reached = cfg.sft.steps, None
    for step in range(cfg.sft.steps):
        if stop is not None and stop.is_set():
            metrics.close()
            raise SFTStopped(step, cfg.sft.steps)
        t0 = time.perf_counter()
        if len(order) < cfg.sft.batch_size:
            extra = list(demos)
            rng.shuffle(extra)
            order.extend(extra)
        batch, order = order[: cfg.sft.batch_size], order[cfg.sft.batch_size :]
        ids, attn, mask = demo_batch(env, tokenizer, batch, device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.max_grad_norm)
        opt.step()
        sched.step()
        if step % 10 == 0 or step == cfg.sft.steps - 1:
            metrics.log(
                {
                    "stage": "sft",
                    "step": step,
                    "loss": round(loss.item(), 5),
                    "grad_norm": round(float(gnorm), 5),
                    "step_time": round(time.perf_counter() - t0, 4),
                }
            )
        if cfg.sft.target_accuracy > 0 and (step + 1) % cfg.sft.check_every == 0:
            acc = sampled_accuracy(
                model,
                tokenizer,
                env,
                check_tasks,
                cfg.inference.temperature,
                cfg.inference.max_tokens,
                cfg.seed + step,
            )
            metrics.log({"stage": "sft", "step": step, "train_accuracy": round(acc, 4)})
            if acc >= cfg.sft.target_accuracy:
                steps_done, reached = step + 1, acc
                log.info("SFT reached sampled train accuracy %.3f at step %d; stopping", acc, step + 1)
                break
    model.eval()

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    info: dict[str, Any] = {"steps": steps_done, "demos": len(demos)}
    if reached is not None:
        info["train_accuracy"] = round(reached, 4)
    publish_dir(run.sft_final, fill, STABLE, info)
    metrics.close()
    log.info("SFT done: %s", run.sft_final)
    return run.sft_final


def main(argv: list[str] | None = None) -> None:
    run, cfg = parse_args("training.sft", argv)
    # Both SFT paths: torch's default of a thread per core spins against the job's other processes.
    set_threads(cfg.trainer.threads)
    if cfg.sft.enabled and cfg.sft.dataset:
        if is_committed(run.sft_final):
            log.info("SFT checkpoint %s already committed; skipping", run.sft_final)
            return
        from training.trainer.sft import main as chat_main  # the sharded trainer (torch.distributed)

        chat_main(run, cfg)
        return
    stop = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    try:
        run_sft(run, cfg, stop)
    except SFTStopped as exc:
        log.warning("SIGUSR1: %s; exiting without a checkpoint, the next attempt redoes SFT", exc)
        sys.exit(EXIT_STOPPED)


if __name__ == "__main__":
    main()
