"""`opsctl watch RUN`: follow a Slurm RL run, and with --remediate keep it alive.

One update = collect (Slurm job and nodes, the run's attempt records, metrics.jsonl, committed
checkpoints, optional health pass) -> judge (which allocated nodes failed) -> act (only with
remediate: drain through the health guardrails, quarantine, exclude, requeue; or give up).
`Watcher.update()` does one of each; the CLI loops it and renders.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opsctl.errors import OpsctlError, UsageError
from opsctl.launch.joblog import failure_cause
from opsctl.launch.ledger import Attempt, Remediation, find_run, load_ledger, read_attempts
from opsctl.launch.quarantine import Quarantine
from opsctl.launch.resize import Resize, resubmit_size
from opsctl.launch.runs import EvalPoint
from opsctl.launch.settings import LaunchSection
from opsctl.model import Job, Node
from opsctl.nodeset import fold

# Job states after which the run is over unless someone requeues it.
FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                 "DEADLINE", "PREEMPTED"}
# Node conditions that mean "this node is gone for the run" (slurmd silent, down, failing).
FAILED_NODE_FLAGS = {"NOT_RESPONDING", "FAIL"}


@dataclass
class NodeView:
    name: str
    state: str  # sinfo-like display state
    health: str = ""  # health status from the health gate source, "" when not checked
    failed: str = ""  # why the watcher considers it failed, "" when fine


@dataclass
class Snapshot:
    time: float
    run_id: str
    job_id: int
    job_state: str
    attempt: int
    attempts: list[dict[str, Any]]
    step: int | None
    reward: float | None
    tokens_per_s: float | None
    off_policy_lag: int | None
    last_checkpoint: int | None
    nodes: list[NodeView]
    final_state: str = ""
    events: list[str] = field(default_factory=list)
    # the last SPARK_POINTS steps' reward (orchestrator) and tokens/s (trainer), oldest first
    reward_history: list[float] = field(default_factory=list)
    tokens_history: list[float] = field(default_factory=list)
    # a verifiers environment's last step: turns and sampled tokens per rollout, the fraction cut at
    # max_tokens, environment errors, reward functions that raised so far (ENV_SHAPE); empty for a
    # built-in environment
    environment: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def node_failure(node: Node) -> str:
    """Why an allocated node counts as failed, "" if it does not."""
    bad = sorted(FAILED_NODE_FLAGS & node.flags)
    if bad:
        return f"slurm {','.join(bad).lower()}"
    if node.state == "down":
        return "slurm down" + (f": {node.reason}" if node.reason else "")
    return ""


def metrics_records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON records of metrics.jsonl; a missing file is empty, and a line still being
    appended (not yet valid JSON) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def _reward(rec: dict[str, Any]) -> Any:
    return next((v for k, v in rec.items() if k.startswith("reward_mean_")), None)


# A verifiers environment's step record (training/orchestrator/vf_rollouts.py: env_metrics):
# metrics.jsonl key prefix -> the name the watch shows it under.
ENV_SHAPE = {
    "turns_mean_": "turns", "sampled_tokens_mean_": "sampled_tokens", "truncated_fraction_": "truncated",
    "env_errors_": "env_errors", "reward_fn_errors_total_": "reward_fn_errors",
}


def _env_shape(rec: dict[str, Any]) -> dict[str, float]:
    return {name: float(v) for prefix, name in ENV_SHAPE.items()
            for k, v in rec.items() if k.startswith(prefix) and isinstance(v, int | float)}


def metrics_summary(path: Path) -> dict[str, Any]:
    """Latest trainer step, tokens/s, reward and off-policy lag from metrics.jsonl, and a verifiers
    environment's turns and errors (`environment`, empty for a built-in environment)."""
    out: dict[str, Any] = {"step": None, "reward": None, "tokens_per_s": None, "off_policy_lag": None,
                           "environment": {}}
    for rec in metrics_records(path):
        comp = rec.get("component")
        if comp == "trainer" and "step" in rec:
            out["step"] = rec["step"]
            out["tokens_per_s"] = rec.get("tokens_per_s")
        elif comp == "orchestrator" and "off_policy_lag_max" in rec:
            out["off_policy_lag"] = rec.get("off_policy_lag_max")
            out["reward"] = _reward(rec)
            out["environment"] = _env_shape(rec)
    return out


SPARK_POINTS = 40
SPARK_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One bar per value, scaled between the values' own minimum and maximum (a flat series is a
    row of middle bars); NaN and infinities are blanks."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return " " * len(values)
    low, high = min(finite), max(finite)
    top = len(SPARK_BARS) - 1
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(" ")
        elif high == low:
            out.append(SPARK_BARS[top // 2])
        else:
            out.append(SPARK_BARS[round((v - low) / (high - low) * top)])
    return "".join(out)


def metric_history(path: Path, points: int = SPARK_POINTS) -> tuple[list[float], list[float]]:
    """The last `points` steps' mean reward (orchestrator) and tokens/s (trainer), oldest first."""
    rewards: deque[float] = deque(maxlen=points)
    tokens: deque[float] = deque(maxlen=points)
    for rec in metrics_records(path):
        comp = rec.get("component")
        if comp == "trainer" and "step" in rec and isinstance(rec.get("tokens_per_s"), int | float):
            tokens.append(float(rec["tokens_per_s"]))
        elif comp == "orchestrator" and "off_policy_lag_max" in rec:
            reward = _reward(rec)
            if isinstance(reward, int | float):
                rewards.append(float(reward))
    return list(rewards), list(tokens)


def sparklines(snap: Snapshot) -> str:
    """`reward ▁▃▅▇ 0.41  tokens/s ▆▆▇▅ 9120` for the live view ("" before the first step)."""
    parts = []
    for name, series, spec in (
        ("reward", snap.reward_history, ".3f"),
        ("tokens/s", snap.tokens_history, ".0f"),
    ):
        if series:
            parts.append(f"{name} {sparkline(series)} {format(series[-1], spec)}")
    return "  ".join(parts)


Curve = list[tuple[int, float]]


def reward_curve(path: Path, points: int = 8) -> tuple[Curve, dict[str, Curve]]:
    """The run's learning curve from metrics.jsonl: the orchestrator's mean training reward,
    averaged into at most `points` bins of consecutive steps (each labelled with its last step),
    and every held-out evaluation as (step, accuracy) per evaluated environment ("" for records
    that name none). A step an attempt redid after a resume counts once, as the later attempt
    logged it (the earlier one's work past the checkpoint is gone)."""
    by_step: dict[int, float] = {}
    for rec in metrics_records(path):
        if rec.get("event") != "eval" and (reward := _reward(rec)) is not None and "step" in rec:
            by_step[int(rec["step"])] = float(reward)
    rewards = sorted(by_step.items())
    evals = {env: [(p.step, p.accuracy) for p in points] for env, points in eval_history(path).items()}
    if not rewards:
        return [], evals
    size = -(-len(rewards) // points)  # ceil: at most `points` bins
    binned = []
    for i in range(0, len(rewards), size):
        chunk = rewards[i : i + size]
        binned.append((chunk[-1][0], sum(r for _, r in chunk) / len(chunk)))
    return binned, evals


def eval_history(path: Path) -> dict[str, list[EvalPoint]]:
    """Every held-out evaluation in metrics.jsonl by environment ("" where a record names none), in
    step order; a step evaluated again after a resume counts as the later attempt logged it."""
    by_env: dict[str, dict[int, EvalPoint]] = {}
    for rec in metrics_records(path):
        if rec.get("event") == "eval" and isinstance(rec.get("eval_accuracy"), int | float) and "step" in rec:
            version = rec.get("policy_version")
            point = EvalPoint(int(rec["step"]), float(rec["eval_accuracy"]),
                              version if isinstance(version, int) else None)
            by_env.setdefault(str(rec.get("env") or ""), {})[point.step] = point
    return {env: [points[s] for s in sorted(points)] for env, points in sorted(by_env.items())}


def trainer_steps(path: Path) -> list[int]:
    """Every trainer step in metrics.jsonl, in order (a step trained twice appears twice)."""
    return [int(rec["step"]) for rec in metrics_records(path)
            if rec.get("component") == "trainer" and "step" in rec]


def committed_checkpoints(run_dir: Path) -> list[int]:
    from training.fsutil import COMMITTED, step_dirs

    return sorted(step_dirs(run_dir / "checkpoints" / "trainer", COMMITTED))


class Watcher:
    def __init__(
        self,
        run_dir: Path,
        backend: Any,
        settings: LaunchSection,
        *,
        remediate: bool = False,
        # drains a run's failed nodes (node -> why) through health's decision path; returns
        # node -> (result, detail): ("applied"|"noop"|"hold"|..., the reason or why not)
        drain: Callable[[dict[str, str]], dict[str, tuple[str, str]]] | None = None,
        health: Callable[[list[str]], dict[str, str]] | None = None,
        partition: str | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.backend = backend
        self.settings = settings
        self.remediate = remediate
        self.drain = drain
        self.health = health
        self.partition = partition
        self.ledger = load_ledger(run_dir)
        self.handled: set[tuple[int, str]] = set()  # (attempt, node) already remediated
        self._ended_at: dict[int, float] = {}  # attempt -> when its job was first seen ended

    @property
    def job_id(self) -> int:
        return self.ledger.job_ids[-1]

    # -- collect -------------------------------------------------------------------------------
    def _job(self) -> Job | None:
        try:
            job: Job = self.backend.job(self.job_id)
            return job
        except UsageError:  # slurmctld forgot the job (MinJobAge)
            return None

    def _sync_attempts(self, job: Job | None) -> int:
        records = read_attempts(self.run_dir)
        for n, rec in sorted(records.items()):
            known = self.ledger.attempt(n)
            if known is None:
                known = Attempt(attempt=n, job_id=int(rec.get("job_id") or self.job_id))
                self.ledger.attempts.append(known)
            known.nodes = list(rec.get("nodes") or known.nodes)
            known.resume_step = int(rec.get("resume_step") or 0)
            known.trainer_world_size = int(rec.get("trainer_world_size") or 0)
            known.start = float(rec.get("start") or known.start)
            if rec.get("end") is not None:
                known.end = rec["end"]
                known.exit_code = rec.get("exit_code")
                if known.state == "RUNNING":
                    known.state = "COMPLETED" if known.exit_code == 0 else "FAILED"
        self.ledger.attempts.sort(key=lambda a: a.attempt)
        current = max(records) if records else (job.restarts if job else 0)
        for a in self.ledger.attempts:
            if a.attempt < current and a.state == "RUNNING":
                a.state = "REQUEUED"
                nxt = self.ledger.attempt(a.attempt + 1)
                a.end = a.end or (nxt.start if nxt else round(time.time(), 3))
        if job is not None:
            last = self.ledger.attempt(current)
            if last is not None and job.finished and last.state == "RUNNING":
                last.state = job.state
                last.end = last.end or round(time.time(), 3)
        return current

    def collect(self) -> tuple[Snapshot, Job | None]:
        job = self._job()
        attempt = self._sync_attempts(job)
        names = list(job.nodes) if job and job.nodes and not job.finished else []
        if not names and job is not None and job.state != "COMPLETED" and self.ledger.attempts:
            # An ended attempt: were its nodes the cause? (A dead node ends the job first.)
            names = list(self.ledger.attempts[-1].nodes)
        views: list[NodeView] = []
        if names:
            health = self.health(names) if self.health else {}
            for node in self.backend.nodes(names):
                why = node_failure(node)
                if not why and health.get(node.name, "").startswith("FAIL"):
                    why = f"health {health[node.name]}"
                views.append(NodeView(node.name, node.display_state, health.get(node.name, ""), why))
        elif job is not None and job.state == "COMPLETED" and self.ledger.attempts:
            # The run is over: show where its last attempt ran, judging nothing (what happens to a
            # node after the run completed is not the run's failure, so nothing here may act on it).
            views = [
                NodeView(node.name, node.display_state, "", "")
                for node in self.backend.nodes(list(self.ledger.attempts[-1].nodes))
            ]
        metrics = metrics_summary(self.run_dir / "metrics.jsonl")
        rewards, tokens = metric_history(self.run_dir / "metrics.jsonl")
        ckpts = committed_checkpoints(self.run_dir)
        self.ledger.checkpoints = ckpts
        self.ledger.last_step = metrics["step"]
        self.ledger.evals = {env: [asdict(p) for p in points]
                             for env, points in eval_history(self.run_dir / "metrics.jsonl").items()}
        snap = Snapshot(
            time=round(time.time(), 3),
            run_id=self.ledger.run_id,
            job_id=self.job_id,
            job_state=job.state if job else "GONE",
            attempt=attempt,
            attempts=[asdict(a) for a in self.ledger.attempts],
            step=metrics["step"],
            reward=metrics["reward"],
            tokens_per_s=metrics["tokens_per_s"],
            off_policy_lag=metrics["off_policy_lag"],
            environment=metrics["environment"],
            last_checkpoint=ckpts[-1] if ckpts else None,
            nodes=views,
            final_state=self.ledger.final_state,
            reward_history=rewards,
            tokens_history=tokens,
        )
        return snap, job

    # -- judge and act ---------------------------------------------------------------------------
    def update(self) -> Snapshot:
        snap, job = self.collect()
        if not self.ledger.final_state:
            self._judge(snap, job)
        snap.final_state = self.ledger.final_state
        snap.attempts = [asdict(a) for a in self.ledger.attempts]
        self.ledger.save()
        return snap

    def _judge(self, snap: Snapshot, job: Job | None) -> None:
        failed = [v for v in snap.nodes if v.failed and (snap.attempt, v.name) not in self.handled]
        if failed and self.remediate:
            self._remediate(snap, failed)
            return
        if job is None:
            self.ledger.final_state = "UNKNOWN"
            snap.events.append(f"job {self.job_id} is no longer known to Slurm")
        elif job.state == "COMPLETED":
            self.ledger.final_state = "COMPLETED"
            snap.events.append(f"run finished at step {snap.step} after {snap.attempt + 1} attempt(s)")
        elif job.state in FAILED_STATES:
            # With --remediate, a job that ended while one of its nodes is still being declared
            # dead (SlurmdTimeout) gets failure_grace_s before the run counts as failed.
            first_seen = self._ended_at.setdefault(snap.attempt, time.monotonic())
            if not self.remediate or time.monotonic() - first_seen >= self.settings.failure_grace_s:
                self.ledger.final_state = job.state
                self.ledger.failure = failure_cause(self.run_dir, self.job_id)
                cause = f": {self.ledger.failure}" if self.ledger.failure else ""
                snap.events.append(
                    f"job {self.job_id} ended {job.state}{cause}; last checkpoint {snap.last_checkpoint}")
            else:
                snap.events.append(f"job {self.job_id} ended {job.state}; checking its nodes")
        for v in snap.nodes:
            if v.failed and not self.remediate:
                snap.events.append(f"{v.name} failed ({v.failed}); --remediate would drain and requeue")

    def _remediate(self, snap: Snapshot, failed: list[NodeView]) -> None:
        now = round(time.time(), 3)
        for v in failed:
            self.handled.add((snap.attempt, v.name))
        names = [v.name for v in failed]
        quarantine = Quarantine.load(self.settings.quarantine_file)
        outcomes: dict[str, tuple[str, str]] = {}
        if self.drain is not None:
            try:
                outcomes = self.drain({v.name: v.failed for v in failed})
            except OpsctlError as exc:  # state or Slurm trouble: still keep the nodes out of the run
                outcomes = {v.name: ("drain-refused", str(exc)) for v in failed}
        for v in failed:
            if v.name in outcomes:
                result, detail = outcomes[v.name]
                # brake, storm or a foreign drain: the node is still kept out of the run below
                action = "drained" if result == "applied" else f"drain-{result}"
                self._note(snap, now, v.name, v.failed, action, detail)
            quarantine.add(v.name, v.failed, self.ledger.run_id, self.job_id)
            self._note(snap, now, v.name, v.failed, "quarantined", self.settings.quarantine_file)
            self.ledger.excluded[v.name] = f"failed in attempt {snap.attempt}: {v.failed}"
        attempt = self.ledger.attempt(snap.attempt)
        if attempt is not None:
            attempt.failed_nodes = sorted(set(attempt.failed_nodes) | set(names))
        if snap.attempt + 1 >= self.settings.max_attempts:
            self._give_up(snap, failed, now)
            return
        exclude = self._exclusions(quarantine)
        try:
            detail = self._requeue(exclude)
        except OpsctlError as exc:
            self.ledger.final_state = "GAVE_UP"
            self._note(snap, now, fold(names), "node failure", "gave-up", str(exc))
            return
        self._note(snap, now, fold(names), "node failure", "requeued", detail)
        self._release_silent(snap, now, [v.name for v in failed if "not_responding" in v.failed])

    def _release_silent(self, snap: Snapshot, now: float, silent: list[str]) -> None:
        """Drained nodes whose slurmd is silent go DOWN (still drained, reason kept): Slurm holds the
        old job COMPLETING on them, and the nodes it shares with the next attempt busy, until
        SlurmdTimeout (300 s by default); DOWN ends that at once. A node that is not drained stays
        as it is: DOWN alone would return it to service when its slurmd registers again."""
        if not silent:
            return
        try:
            drained = [n for n in self.backend.nodes(silent) if n.drain_flag and n.state != "down"]
            for node in drained:
                self.backend.mark_down([node.name], node.reason)
                self._note(snap, now, node.name, "slurmd not responding", "marked-down",
                           "drained and down: Slurm releases its job now, not after SlurmdTimeout")
        except OpsctlError as exc:  # Slurm declares it DOWN after SlurmdTimeout on its own
            self._note(snap, now, fold(silent), "slurmd not responding", "mark-down-failed", str(exc))

    def _exclusions(self, quarantine: Quarantine) -> list[str]:
        """Quarantined nodes and the nodes that failed in this run, as far as Slurm knows them."""
        wanted = quarantine.nodes | {n for a in self.ledger.attempts for n in a.failed_nodes}
        return sorted(n.name for n in self.backend.nodes(None) if n.name in wanted)

    def _requeue(self, exclude: list[str]) -> str:
        job = self._job()
        if self.settings.requeue_mode == "requeue":
            return self._requeue_in_place(job, exclude)
        script_path = Path(self.ledger.run_dir) / "job.sbatch"
        script = script_path.read_text()
        if "\n#SBATCH --nodelist=" in script:
            raise OpsctlError(f"run {self.ledger.run_id} was launched on a fixed --nodelist that now "
                              f"holds failed nodes ({fold(exclude)}); relaunch it on other nodes")
        size = self._resubmit_size(exclude)
        if job is not None and not job.finished:
            self.backend.cancel(self.job_id)
        from opsctl.model import SubmitOptions

        new_id = int(self.backend.submit(script, SubmitOptions(exclude=exclude, nodes=size.nodes)))
        self.ledger.job_ids.append(new_id)
        note = f"; {size.note}" if size.note else ""
        return f"resubmitted as job {new_id} excluding {fold(exclude) or 'nothing'}{note}"

    def _resubmit_size(self, exclude: list[str]) -> Resize:
        """The launch size while the partition still has that many usable nodes, else (shrinking
        allowed) the nodes left: in service, not excluded; nodes busy with other jobs count."""
        left = [
            n.name for n in self.backend.nodes(None)
            if (not self.partition or self.partition in n.partitions)
            and not n.out_of_service and n.name not in exclude
        ]
        return resubmit_size(
            self.ledger.nodes_requested, self.ledger.inference_nodes, len(left),
            shrink=self.settings.shrink_on_failure, min_trainer_nodes=self.settings.min_trainer_nodes,
        )

    def _requeue_in_place(self, job: Job | None, exclude: list[str]) -> str:
        """`scontrol requeue`; ExcNodeList is updated only for excluded nodes still in service (a
        drained node is never scheduled): on 22.05 updating it also loses the GPU allocation."""
        if job is not None and job.state not in {"PENDING", "REQUEUED", "REQUEUE_HOLD"}:
            self.backend.requeue(self.job_id)
        in_service = [n.name for n in self.backend.nodes(exclude) if not n.out_of_service] if exclude else []
        if in_service:
            _scontrol(self.backend, ["update", f"JobId={self.job_id}", f"ExcNodeList={fold(exclude)}"])
        # A requeued job keeps its size: with too few nodes left it waits (resubmit would shrink).
        short = self._resubmit_size(exclude)
        keeps = self.ledger.nodes_requested
        wait = f"; waits for nodes: a requeued job keeps its {keeps}" if short.nodes else ""
        return f"job {self.job_id} requeued" + (f", ExcNodeList={fold(exclude)}" if in_service else "") + wait

    def _give_up(self, snap: Snapshot, failed: list[NodeView], now: float) -> None:
        job = self._job()
        if job is not None and not job.finished:
            self.backend.cancel(self.job_id)
        self.ledger.final_state = "GAVE_UP"
        for v in failed:
            limit = self.settings.max_attempts
            self._note(snap, now, v.name, v.failed, "gave-up",
                       f"{snap.attempt + 1} attempts reached launch.max_attempts={limit}")

    def _note(self, snap: Snapshot, now: float, node: str, why: str, action: str, detail: str) -> None:
        self.ledger.remediations.append(Remediation(now, node, why, action, detail))
        snap.events.append(f"{action} {node}: {why} ({detail})")

    # -- end ---------------------------------------------------------------------------------------
    def summary(self) -> str:
        led = self.ledger
        lines = [f"run {led.run_id}: {led.final_state or 'RUNNING'} after {len(led.attempts)} attempt(s), "
                 f"last step {led.last_step}, checkpoints {led.checkpoints or 'none'}"]
        if led.failure:
            lines.append(f"  cause: {led.failure}")
        for a in led.attempts:
            failed = f", failed nodes {fold(a.failed_nodes)}" if a.failed_nodes else ""
            world = f", {a.trainer_world_size} trainer ranks" if a.trainer_world_size else ""
            lines.append(f"  attempt {a.attempt}: job {a.job_id} {a.state} on {fold(a.nodes) or '?'}{world}, "
                         f"resumed at step {a.resume_step}{failed}")
        for r in led.remediations:
            lines.append(f"  {r.action} {r.node}: {r.why} ({r.detail})")
        curve, evals = reward_curve(self.run_dir / "metrics.jsonl")
        if curve:
            lines.append("  training reward (mean, by step): "
                         + "  ".join(f"{step}:{reward:.2f}" for step, reward in curve))
        for env, points in evals.items():
            label = f"held-out accuracy{f' of {env}' if env else ''} (by step):"
            lines.append(f"  {label:<33}" + "  ".join(f"{step}:{acc:.2f}" for step, acc in points))
        return "\n".join(lines)


def _scontrol(backend: Any, args: list[str]) -> None:
    """scontrol through the CLI backend's runner (its SLURM_CONF, timeouts, error mapping)."""
    run = getattr(backend, "run", None)
    if callable(run):
        run(["scontrol", *args])
        return
    env = getattr(backend, "env", None)
    proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, env=env, timeout=60,
                          check=False)
    if proc.returncode != 0:
        raise OpsctlError(f"scontrol {args[0]} failed: {proc.stderr.strip()}")


# -- wiring from configuration ---------------------------------------------------------------------
def make_watcher(config_path: str | None, run: str, remediate: bool) -> Watcher:
    from opsctl.launch.slurm import load_context

    ctx = load_context(config_path)
    run_dir = find_run(run, ctx.settings.runs_dir)
    drain = None
    if remediate:
        from opsctl.remediation.passes import drain_failed_nodes

        def drain(failed: dict[str, str]) -> dict[str, tuple[str, str]]:
            run_id = load_ledger(run_dir).run_id
            decisions = drain_failed_nodes(ctx.config, ctx.backend, failed, run_id)
            return {d.node: (d.result if d.action == "drain" else d.action, d.reason or d.why)
                    for d in decisions if d.node in failed}

    health = None
    if ctx.settings.health_source != "none":
        from opsctl.launch.slurm import health_exclusions

        def health(names: list[str]) -> dict[str, str]:
            return health_exclusions(ctx, names)

    return Watcher(run_dir, ctx.backend, ctx.settings, remediate=remediate,
                   drain=drain, health=health,
                   partition=ctx.partition)
