"""Orchestrator process: rollouts in, trainer batches out.

    python -m training.orchestrator --run-dir RUN_DIR [--resume-step N]

Threads sharing one lock:
- the weight watcher pushes every newly committed weights/step_V to the inference servers as soon
  as it appears (the servers pause, swap and resume without dropping in-flight requests), then
  tells the scheduler, which cancels in-flight groups that could only arrive too stale;
- the producer (training.orchestrator.scheduler) draws tasks, waits until the servers hold a policy
  at most `async_level` versions older than the batch the groups will land in, requests
  `group_size` completions per task (continuously, a bounded number of groups per server, or a
  batch at a time), scores them with the environment's rubric, filters them and buffers them;
- the main thread builds batch s from the buffer, dropping (and re-queueing) groups whose policy is
  more than `max_off_policy_steps` behind s, packs micro-batches per trainer rank and publishes
  rollouts/step_s with a STABLE marker.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import torch

from training.common import seed_all, set_threads
from training.config import JobConfig, load_config
from training.envs import Environment, VerifiersEnvironment, load_any, prompt_ids
from training.envs.verifiers_env import ENV_DIR
from training.fsutil import COMMITTED, STABLE, latest_step, publish_dir, step_dirs
from training.inference.client import CancelHandle, Completion, OpenAICompatClient, ServerError
from training.metrics import Metrics
from training.orchestrator.batch import (
    Rollout,
    RolloutGroup,
    TaskSampler,
    collate,
    group_advantages,
    pack,
    shard,
    to_samples,
)
from training.orchestrator.evaluation import EvalResult, eval_environments, evaluate_env, evaluate_vf
from training.orchestrator.failover import Replicas, call_with_failover, transient
from training.orchestrator.scheduler import GroupFilter, RolloutScheduler
from training.orchestrator.vf_rollouts import VerifiersRollouts, VfOutput, env_metrics, to_group
from training.rundir import RunDir
from training.tokenizer import load_tokenizer

log = logging.getLogger("orchestrator")
T = TypeVar("T")


def inference_clients(run: RunDir, cfg: JobConfig, count: int) -> list[OpenAICompatClient]:
    urls = list(cfg.inference.urls) or [run.discover(f"inference-{i}")["url"] for i in range(count)]
    return [OpenAICompatClient.from_config(u, cfg.inference) for u in urls]


def continuous_schedule(cfg: JobConfig) -> bool:
    """Whether groups are scheduled continuously (orchestrator.scheduling, "auto" by backend).
    Nothing can overlap at async_level=0; the batch schedule keeps that path bitwise exact."""
    oc = cfg.orchestrator
    if oc.async_level == 0:
        return False
    if oc.scheduling == "auto":
        return cfg.inference.backend == "vllm"
    return oc.scheduling == "continuous"


def announced_url(run: RunDir, replica: int) -> str:
    """The address replica `replica` last announced in peers/, "" while it has none readable."""
    try:
        return str(json.loads((run.peers / f"inference-{replica}.json").read_text())["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


class Orchestrator:
    def __init__(
        self,
        run: RunDir,
        cfg: JobConfig,
        clients: list[OpenAICompatClient],
        env: Environment | VerifiersEnvironment,
        tokenizer: Any,
        metrics: Metrics,
        start_step: int = 0,
    ) -> None:
        self.run, self.cfg, self.clients, self.env = run, cfg, clients, env
        self.tok = tokenizer
        self.metrics = metrics
        self.oc = cfg.orchestrator
        inf = cfg.inference
        self.vf = VerifiersRollouts(env, inf.served_model_name, self.oc.group_size, inf.max_tokens,
                                    inf.temperature, inf.request_timeout_s) \
            if isinstance(env, VerifiersEnvironment) else None
        self.sampler = TaskSampler(len(env.dataset), cfg.seed)
        self.consumed: list[str] = []
        self.step = start_step
        self.loaded_version = 0
        self.last_update_s = 0.0
        self.cv = threading.Condition()
        self.done = False
        self.error: BaseException | None = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(clients)))
        oc = self.oc
        self.replicas = Replicas(len(clients), oc.replica_cooldown_s)
        self.eval_envs = eval_environments(cfg, env) if cfg.eval.size else []
        self.eval_pool = ThreadPoolExecutor(max_workers=max(1, len(clients)), thread_name_prefix="eval")
        self._eval_thread: threading.Thread | None = None
        self._sync_locks = [threading.Lock() for _ in clients]
        self.sched = RolloutScheduler(
            servers=len(clients),
            sampler=self.sampler,
            request=self.request,
            score=self.score,
            batch_groups=oc.batch_groups,
            async_level=oc.async_level,
            max_off_policy_steps=oc.max_off_policy_steps,
            continuous=continuous_schedule(cfg),
            per_server=oc.max_inflight_groups,
            group_filter=GroupFilter(
                zero_advantage=oc.filter_zero_advantage,
                too_easy=oc.too_easy_mean_reward if oc.filter_too_easy else None,
                too_hard=oc.too_hard_mean_reward if oc.filter_too_hard else None,
            ),
            seed=cfg.seed,
            start_step=start_step,
            cv=self.cv,
        )
        # State as it was before each recent batch: an early trainer checkpoint (SIGUSR1) at step s
        # needs the orchestrator's state at s, which the orchestrator has usually run past.
        self.snapshots: dict[int, dict[str, Any]] = {}

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        with self.cv:
            state = self.sampler.state_dict()
            # Drawn but not yet trained on: handed back first on resume, so nothing is skipped.
            state["requeued"] = self.sched.pending_tasks() + state["requeued"]
            stats = self.sched.stats
            return {
                "step": self.step,
                "sampler": state,
                "consumed": list(self.consumed),
                "dropped_total": stats.dropped,
                "cancelled_total": stats.cancelled,
                "filtered_total": dict(stats.filtered),
            }

    def save_checkpoint(self, state: dict[str, Any] | None = None) -> None:
        state = state if state is not None else self.state_dict()
        step = int(state["step"])
        path = self.run.step(self.run.ckpt("orchestrator"), step)
        if (path / COMMITTED).exists():
            return
        publish_dir(path, lambda tmp: torch.save(state, tmp / "state.pt"), COMMITTED, {"step": step})

    def serve_checkpoint_requests(self) -> None:
        if not self.run.checkpoint_requests.is_dir():
            return
        for req in self.run.checkpoint_requests.iterdir():
            if req.name.startswith("step_") and req.name[5:].isdigit():
                snap = self.snapshots.get(int(req.name[5:]))
                if snap is not None:
                    self.save_checkpoint(snap)

    def load_checkpoint(self, step: int) -> None:
        state = torch.load(
            self.run.step(self.run.ckpt("orchestrator"), step) / "state.pt", weights_only=True
        )
        self.sampler.load_state_dict(state["sampler"])
        self.consumed = list(state["consumed"])
        stats = self.sched.stats
        stats.dropped = int(state["dropped_total"])
        # Absent from checkpoints written before continuous scheduling.
        stats.cancelled = int(state.get("cancelled_total", 0))
        stats.filtered = Counter(state.get("filtered_total", {}))
        self.step = self.sched.taken = int(state["step"])

    # -- generation -----------------------------------------------------------------------------
    @property
    def stop_strings(self) -> list[str]:
        """The environment's stop strings, then any extra ones from inference.stop."""
        env = list(self.env.stop_sequences)
        return env + [s for s in self.cfg.inference.stop if s not in env]

    def _prompt_ids(self, prompt: str) -> list[int]:
        return prompt_ids(self.tok, prompt)

    def generate(
        self, indices: list[int], n: int, temperature: float, seed: int, dataset: Any = None,
        pool: ThreadPoolExecutor | None = None,
    ) -> list[tuple[int, list[Completion]]]:
        data = dataset if dataset is not None else self.env.dataset
        prompts = [self._prompt_ids(data[i].prompt) for i in indices]
        # Split the prompts across the servers; each server gets one request.
        parts = [list(range(k, len(prompts), len(self.clients))) for k in range(len(self.clients))]

        def part_request(k: int, part: list[int]) -> list[list[Completion]]:
            def complete(replica: int) -> list[list[Completion]]:
                return self.ready(replica).complete(
                    [prompts[i] for i in part], n, self.cfg.inference.max_tokens, temperature, seed + k,
                    stop=self.stop_strings,
                )

            return self.failover(complete, k)

        futures = [(pool or self.pool).submit(part_request, k, part) for k, part in enumerate(parts) if part]
        out: dict[int, list[Completion]] = {}
        for part, fut in zip([p for p in parts if p], futures, strict=True):
            for i, comps in zip(part, fut.result(), strict=True):
                out[i] = comps
        return [(indices[i], out[i]) for i in range(len(indices))]

    def request(
        self, server: int, indices: list[int], seed: int, cancel: CancelHandle
    ) -> list[list[Completion]] | list[list[VfOutput]]:
        """group_size completions for each task, from one server in one request (a verifiers
        environment's rollouts, which it drives itself); `cancel` aborts it (RequestCancelled, never
        retried)."""
        if self.vf is not None:
            vf = self.vf
            return self.failover(lambda r: vf.run(self.ready(r).base_url, indices, cancel), server)
        prompts = [self._prompt_ids(self.env.dataset[i].prompt) for i in indices]
        inf = self.cfg.inference

        def complete(replica: int) -> list[list[Completion]]:
            return self.ready(replica).complete(
                prompts, self.oc.group_size, inf.max_tokens, inf.temperature, seed,
                stop=self.stop_strings, cancel=cancel,
            )

        return self.failover(complete, server)

    # -- replicas -------------------------------------------------------------------------------
    def failover(self, complete: Callable[[int], T], first: int) -> T:
        oc = self.oc
        return call_with_failover(complete, first, self.replicas, oc.request_attempts, oc.request_backoff_s,
                                  oc.replica_wait_s)

    def ready(self, replica: int) -> OpenAICompatClient:
        """The replica's client; one that failed since its weights were last loaded is first found
        again (a restarted built-in server announces a new port) and given the policy the others
        serve, so that it rejoins without serving its starting weights."""
        if self.replicas.stale(replica):
            with self._sync_locks[replica]:
                if self.replicas.stale(replica):
                    self._resync(replica)
        return self.clients[replica]

    def _resync(self, replica: int) -> None:
        if not self.cfg.inference.urls:
            url = announced_url(self.run, replica)
            if url and url != self.clients[replica].base_url:
                log.info("replica %d is now at %s", replica, url)
                self.clients[replica] = OpenAICompatClient.from_config(url, self.cfg.inference)
        loaded = 0
        while (version := self.loaded_version) > loaded:  # again if a newer one came meanwhile
            self.clients[replica].update_weights(str(self.run.step(self.run.weights, version)), version)
            log.info("replica %d loaded policy version %d", replica, version)
            loaded = version
        self.replicas.synced(replica)

    def update_replicas(self, path: str, version: int) -> None:
        """Load a new policy into every replica that answers; one that does not is marked down and
        is given the then-current policy when it rejoins. Other errors end the job."""
        live = [r for r in range(len(self.clients)) if not self.replicas.stale(r)]
        futures = {r: self.pool.submit(self.clients[r].update_weights, path, version) for r in live}
        for replica, fut in futures.items():
            try:
                fut.result()
            except ServerError as exc:
                if not transient(exc):
                    raise
                log.warning("replica %d did not take policy version %d: %s", replica, version, exc)
                self.replicas.failed(replica)

    def score(self, index: int, comps: list[Any], fallback_version: int) -> RolloutGroup:
        task = self.env.dataset[index]
        if self.vf is not None:
            return to_group(task.id, index, comps, fallback_version, self.oc.normalize_adv_std)
        env = self.env
        assert isinstance(env, Environment)
        prompt = self._prompt_ids(task.prompt)
        rollouts = []
        for c in comps:
            text = self.tok.decode(c.tokens, skip_special_tokens=True)
            reward, parts = env.rubric.score(text, task, env.parser)
            version = c.versions[0] if c.versions else fallback_version
            rollouts.append(Rollout(prompt, c.tokens, c.logprobs, reward, version,
                                    truncated=c.finish_reason == "length", parts=parts))
        for r, a in zip(
            rollouts, group_advantages([r.reward for r in rollouts], self.oc.normalize_adv_std), strict=True
        ):
            r.advantage = a
        return RolloutGroup(task.id, index, rollouts)

    # -- threads --------------------------------------------------------------------------------
    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                log.exception("thread failed")
                with self.cv:
                    self.error = exc
                    self.sched.fail(exc)  # wakes take_batch too

        return run

    def weight_watcher(self) -> None:
        while not self.done:
            latest = latest_step(self.run.weights)
            if latest is not None and latest > self.loaded_version:
                path = str(self.run.step(self.run.weights, latest))
                t0 = time.perf_counter()
                self.update_replicas(path, latest)
                with self.cv:
                    self.loaded_version = latest
                    self.last_update_s = time.perf_counter() - t0
                    self.sched.on_weights(latest)
                    self.cv.notify_all()
                log.info("inference now at policy version %d", latest)
            with self.cv:
                self.serve_checkpoint_requests()
            time.sleep(0.02)

    # -- batches --------------------------------------------------------------------------------
    def publish(self, step: int, groups: list[RolloutGroup]) -> int:
        samples = to_samples(groups, self.oc.mask_truncated, step, self.oc.max_off_policy_steps)
        micro = pack(samples, self.oc.micro_batch_tokens, self.oc.pack_row_tokens)
        ranks = shard(micro, self.cfg.trainer.world_size)
        loss_tokens = sum(sum(s.loss_mask) for s in samples)  # the loss is normalised over these
        pad = self.tok.pad_token_id

        def fill(tmp: Path) -> None:
            for r, mbs in enumerate(ranks):
                torch.save(
                    {
                        "step": step,
                        "loss_tokens": loss_tokens,
                        "micro_batches": [collate(mb, pad) for mb in mbs],
                    },
                    tmp / f"rank_{r}.pt",
                )

        publish_dir(
            self.run.step(self.run.rollouts, step),
            fill,
            STABLE,
            {"step": step, "groups": [g.task_id for g in groups]},
        )
        return loss_tokens

    def evaluate(self, tag_step: int) -> list[EvalResult]:
        """Held-out evaluation of every [eval] environment on the policy the servers hold now; each
        result goes to metrics.jsonl and the env-labelled gauges. Its requests use a pool of their
        own, so weight updates never queue behind an evaluation running beside the rollouts."""
        ec = self.cfg.eval
        results = []
        for env in self.eval_envs:
            if isinstance(env, VerifiersEnvironment):
                result = evaluate_vf(env, ec, self._vf_eval_rollouts, tag_step, self.loaded_version)
                if result is not None:
                    self._record_eval(result, tag_step)
                    results.append(result)
                continue

            def generate(indices: list[int], n: int, temperature: float, seed: int, data: Any) -> Any:
                return self.generate(indices, n, temperature, seed, dataset=data, pool=self.eval_pool)

            result = evaluate_env(env, ec, generate, self._decode, tag_step, self.cfg.seed + 17,
                                  self.loaded_version)
            if result is None:
                continue
            self._record_eval(result, tag_step)
            results.append(result)
        return results

    def _record_eval(self, result: EvalResult, tag_step: int) -> None:
        self.metrics.log(result.record())
        self.metrics.eval_gauges(result.env, result.accuracy, result.pass_at)
        log.info("eval of %s at step %d (policy %d): accuracy %.3f", result.env, tag_step,
                 result.policy_version, result.accuracy)
        if result.errors:  # scored as wrong: an accuracy that fell may be the environment's failure
            log.warning("eval of %s at step %d: %d of %d rollouts ended in an environment error",
                        result.env, tag_step, result.errors, result.size * result.samples)

    def _vf_eval_rollouts(self, rows: list[dict[str, Any]], n: int, temperature: float
                          ) -> list[list[VfOutput]]:
        """`n` rollouts of each held-out row, the rows spread over the servers (with failover)."""
        vf = self.vf
        assert vf is not None
        parts = [list(range(k, len(rows), len(self.clients))) for k in range(len(self.clients))]

        def part_request(k: int, part: list[int]) -> list[list[VfOutput]]:
            return self.failover(
                lambda r: vf.run(self.ready(r).base_url, part, rows=rows, n=n, temperature=temperature), k)

        futures = [(p, self.eval_pool.submit(part_request, k, p)) for k, p in enumerate(parts) if p]
        out: dict[int, list[VfOutput]] = {}
        for part, fut in futures:
            out.update(zip(part, fut.result(), strict=True))
        return [out[i] for i in range(len(rows))]

    def _decode(self, tokens: list[int]) -> str:
        return str(self.tok.decode(tokens, skip_special_tokens=True))

    def evaluate_in_background(self, tag_step: int) -> None:
        """An [eval] every-N-steps evaluation beside the rollouts; skipped (and logged) while the
        previous one still runs, so evaluations never pile up behind a slow server."""
        if self._eval_thread is not None and self._eval_thread.is_alive():
            log.warning("eval at step %d skipped: the one before is still running", tag_step)
            return
        def run() -> None:
            self.evaluate(tag_step)

        self._eval_thread = threading.Thread(target=self._guard(run), name=f"eval-{tag_step}", daemon=True)
        self._eval_thread.start()

    def record_samples(self, groups: list[RolloutGroup]) -> None:
        """A few of the step's rollouts, readable, for `opsctl runs view`: one from each of the first
        metrics.rollouts_per_step groups (its k-th rollout for the k-th group, so rewards vary)."""
        lines = []
        for k, group in enumerate(groups[: self.cfg.metrics.rollouts_per_step]):
            r = group.rollouts[k % len(group.rollouts)]
            lines.append(json.dumps({
                "time": round(time.time(), 3), "step": self.step, "env": self.env.name,
                "task_id": group.task_id,
                "prompt": self.tok.decode(r.prompt, skip_special_tokens=True),
                "completion": self.tok.decode(r.completion, skip_special_tokens=True),
                "reward": r.reward, "parts": r.parts, "advantage": r.advantage, "policy_version": r.version,
                "off_policy_lag": self.step - r.version, "truncated": r.truncated,
                **({"error": r.error} if r.error else {}),
            }, sort_keys=True))
        if lines:
            with self.run.rollout_samples.open("a") as fh:
                fh.write("\n".join(lines) + "\n")

    def wait_version(self, version: int) -> None:
        with self.cv:
            while self.loaded_version < version:
                if self.error:
                    raise RuntimeError("orchestrator thread failed") from self.error
                self.cv.wait(timeout=0.5)

    def run_loop(self, resume: bool) -> None:
        oc, tc = self.oc, self.cfg.trainer
        threads = [threading.Thread(target=self._guard(self.weight_watcher), name="weights", daemon=True)]
        threads[0].start()
        ec = self.cfg.eval
        if not resume and ec.at_start and self.eval_envs:
            self.evaluate(0)
        threads.append(threading.Thread(target=self._guard(self.sched.run), name="producer", daemon=True))
        threads[1].start()
        start = self.step
        t_prev = time.perf_counter()
        idle_prev = self.sched.idle_seconds()
        stats = self.sched.stats
        cancelled_prev, filtered_prev = stats.cancelled, Counter(stats.filtered)
        while self.step < tc.steps:
            snapshot = self.state_dict()
            with self.cv:
                self.snapshots[self.step] = snapshot
                for old in [s for s in self.snapshots if s < self.step - oc.async_level - 4]:
                    del self.snapshots[old]
            if self.step > start and self.step % tc.checkpoint_every == 0:
                self.save_checkpoint(snapshot)
            if ec.every and self.eval_envs and self.step > 0 and self.step % ec.every == 0:
                self.evaluate_in_background(self.step)
            groups, lags, dropped = self.sched.take_batch(self.step)
            with self.cv:
                self.consumed.extend(g.task_id for g in groups)
            loss_tokens = self.publish(self.step, groups)
            now = time.perf_counter()
            idle = self.sched.idle_seconds()
            with self.cv:
                cancelled = stats.cancelled - cancelled_prev
                filtered = {
                    k: stats.filtered[k] - filtered_prev[k]
                    for k in ("zero_advantage", "too_easy", "too_hard")
                }
                cancelled_prev, filtered_prev = stats.cancelled, Counter(stats.filtered)
            self.metrics.count("groups_cancelled", cancelled, "In-flight groups cancelled as too stale")
            for why, n in filtered.items():
                self.metrics.count(f"groups_filtered_{why}", n, f"Groups filtered out: {why}")
            rewards = [r for g in groups for r in g.rewards]
            n_roll = len(rewards)
            hist = Counter(lags)
            for lag in lags:
                self.metrics.lag.observe(lag)
            self.metrics.count("stale_groups_dropped", dropped)
            rec: dict[str, Any] = {
                "step": self.step,
                "env": self.env.name,
                f"reward_mean_{self.env.name}": statistics.fmean(rewards),
                f"reward_std_{self.env.name}": statistics.pstdev(rewards),
                "rollouts": n_roll,
                "rollouts_per_s": n_roll / max(now - t_prev, 1e-9),
                "step_time": now - t_prev,
                "completion_tokens": loss_tokens,
                "truncated_completions": sum(r.truncated for g in groups for r in g.rollouts),
                "off_policy_lag_hist": {str(k): v for k, v in sorted(hist.items())},
                "off_policy_lag_max": max(lags),
                "dropped_groups": dropped,
                # How far behind the batch it was requested for the policy was when generation began:
                # async_level bounds this.
                "async_gap_max": max(g.target - g.start_version for g in groups),
                "dropped_groups_total": stats.dropped,
                # Requests abandoned in flight: their policy would be too old for any batch they
                # could still land in.
                "cancelled_groups": cancelled,
                "cancelled_groups_total": stats.cancelled,
                **{f"filtered_{why}": n for why, n in filtered.items()},
                "filtered_groups_total": sum(stats.filtered.values()),
                "inflight_groups": self.sched.live_groups(),
                # Share of the step's wall time the servers had no request outstanding.
                "inference_idle_frac": (idle - idle_prev) / (len(self.clients) * max(now - t_prev, 1e-9)),
                "scheduling": "continuous" if self.sched.continuous else "batch",
                "policy_version": self.loaded_version,
                "weight_update_time": self.last_update_s,
            }
            if self.vf is not None:
                rec.update(env_metrics(self.env.name, groups, self.vf.reward_errors))
            self.metrics.log(rec)
            self.record_samples(groups)
            t_prev, idle_prev = now, idle
            with self.cv:
                self.step += 1
                self.cv.notify_all()
        with self.cv:
            self.done = True
            self.sched.stop()
        threads[1].join(timeout=600)
        if self._eval_thread is not None:
            self._eval_thread.join()
        if self.error:
            raise RuntimeError("orchestrator thread failed") from self.error
        if ec.at_end and self.eval_envs:
            self.done = False  # the watcher must still deliver the final policy
            watcher = threading.Thread(
                target=self._guard(self.weight_watcher), name="weights-final", daemon=True
            )
            watcher.start()
            self.wait_version(tc.steps)
            self.evaluate(tc.steps)
            self.done = True
            watcher.join(timeout=10)
        threads[0].join(timeout=10)
        self.pool.shutdown()
        self.eval_pool.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="training.orchestrator")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--config", default=None)
    ap.add_argument("--resume-step", type=int, default=None)
    ap.add_argument("--inference-servers", type=int, default=1)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s orchestrator %(levelname)s %(message)s")
    # httpx logs every request at INFO (a verifiers environment sends one per rollout).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    run = RunDir(Path(args.run_dir))
    cfg = load_config(args.config or run.config)
    set_threads(cfg.orchestrator.threads)
    seed_all(cfg.seed)
    env = load_any(cfg.env.name, cfg.env.kwargs, [run.root / ENV_DIR])
    tokenizer = load_tokenizer(run.initial_model(cfg))
    clients = inference_clients(run, cfg, args.inference_servers)
    for c in clients:
        c.wait_ready()
    metrics = Metrics(
        run, "orchestrator", port=cfg.metrics.port if cfg.metrics.enabled else None, host=cfg.metrics.host
    )
    orch = Orchestrator(run, cfg, clients, env, tokenizer, metrics)
    if args.resume_step:
        if args.resume_step not in step_dirs(run.ckpt("orchestrator"), COMMITTED):
            raise SystemExit(f"training.orchestrator: no committed checkpoint for step {args.resume_step}")
        orch.load_checkpoint(args.resume_step)
        log.info("resumed at step %d (%d tasks consumed)", orch.step, len(orch.consumed))
    orch.run_loop(resume=bool(args.resume_step))
    metrics.close()
    log.info("done")


if __name__ == "__main__":
    main()
