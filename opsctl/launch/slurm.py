"""`opsctl launch rl-run` on Slurm: resolve, gate on node health, render, submit, record.

    plan = prepare(request)          # reads config, Slurm, quarantine, health; changes nothing
    print(plan.script)               # --dry-run stops here
    submit(plan)                     # run directory, config, script, ledger, sbatch

`plan_layout` is pure (nodes and verdicts in, a plan out) so that exclusions and the rendered
script can be tested without a cluster.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.errors import EXIT_UNKNOWN, ConfigError, OpsctlError, Refused, Unreachable, UsageError
from opsctl.launch.datasets import check_sft_dataset
from opsctl.launch.environments import StagedEnvironment, stage
from opsctl.launch.ledger import Ledger
from opsctl.launch.plan import refuse_unfit
from opsctl.launch.quarantine import Quarantine
from opsctl.launch.render import ScriptParams, VllmParams, render_script
from opsctl.launch.settings import LaunchSection
from opsctl.model import Node
from opsctl.nodeset import fold

# Values that land on #SBATCH lines and in the script: plain paths and names only.
_SAFE = re.compile(r"^[A-Za-z0-9_./+@%:=,-]+$")


@dataclass
class LaunchRequest:
    config: str | None = None
    overrides: list[str] = field(default_factory=list)
    nodes: int | None = None
    inference_nodes: int | None = None
    nodelist: str | None = None
    run_dir: str | None = None  # default: <runs_dir>/<run_id>


@dataclass
class LaunchPlan:
    run_id: str
    run_dir: Path
    job_config: Any  # training.config.JobConfig
    nodes: int
    inference_nodes: int
    excluded: dict[str, str]  # node -> why it is not used
    nodelist: list[str]
    script: str
    settings: LaunchSection
    config_text: str = ""


@dataclass
class Submitted:
    run_id: str
    run_dir: Path
    job_id: int
    ledger: Ledger


def _check_safe(what: str, value: str) -> str:
    if not _SAFE.match(value):
        raise UsageError(f"{what} {value!r}: only letters, digits and ._/+@%:=,- are allowed")
    return value


def resolve_job_config(req: LaunchRequest) -> Any:
    """The training config (file + overrides), validated; a bad key is a ConfigError."""
    from training import config as tconfig

    try:
        cfg = tconfig.load_config(req.config, list(req.overrides))
    except tconfig.ConfigError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.model.path:
        p = Path(cfg.model.path)
        if not p.is_dir():
            raise ConfigError(f"model.path: checkpoint directory {p} does not exist")
        if not (p / "config.json").is_file():
            raise ConfigError(f"model.path: {p} holds no checkpoint (no config.json)")
    check_sft_dataset(cfg)
    return cfg



def inference_share(settings: LaunchSection, nodes: int) -> int:
    """Inference nodes for a launch of `nodes` without --inference-nodes: [launch] inference_nodes
    wherever it leaves a trainer node, else the same share of `nodes` it is of [launch] nodes (at
    least one, leaving a trainer), so that a small launch is planned rather than refused."""
    if settings.inference_nodes < nodes:
        return settings.inference_nodes
    return max(1, min(nodes - 1, round(nodes * settings.inference_nodes / settings.nodes)))


def tasks_per_node(settings: LaunchSection, job_config: Any) -> tuple[int, str]:
    """The most tasks one step of the job starts on a node, and what they are: each needs a CPU
    of its own. Trainer ranks ([launch] tasks_per_node) or vLLM replicas (one per
    tensor-parallel group of the node's GPUs); the other steps run one task per node."""
    ic = job_config.inference
    replicas = 0
    if ic.backend == "vllm" and not ic.urls and ic.tensor_parallel_size > 0:
        replicas = settings.gpus_per_node // ic.tensor_parallel_size
    if replicas > settings.tasks_per_node:
        return replicas, "vLLM replicas per node (inference.tensor_parallel_size)"
    return settings.tasks_per_node, "trainer ranks per node ([launch] tasks_per_node)"


def plan_layout(
    settings: LaunchSection,
    job_config: Any,
    partition_nodes: Sequence[Node],
    quarantined: set[str],
    unhealthy: Mapping[str, str],
    *,
    run_id: str,
    run_dir: Path,
    nodes: int | None = None,
    inference_nodes: int | None = None,
    nodelist: Sequence[str] | None = None,
    partition: str | None = None,
) -> LaunchPlan:
    """Choose the nodes and render the script; raises before anything is created or submitted."""
    n = nodes if nodes is not None else (len(nodelist) if nodelist else settings.nodes)
    m = inference_nodes if inference_nodes is not None else inference_share(settings, n)
    if n < 2:
        raise UsageError(f"--nodes must be at least 2 (inference and trainer), got {n}")
    if not 1 <= m < n:
        raise UsageError(f"--inference-nodes must be between 1 and {n - 1} for {n} nodes, got {m}")
    by_name = {node.name: node for node in partition_nodes}
    where = f"partition {partition}" if partition else "the cluster"
    if n > len(by_name):
        raise UsageError(f"asked for {n} nodes but {where} has only {len(by_name)}")
    tasks, what = tasks_per_node(settings, job_config)
    excluded: dict[str, str] = {}
    for name, node in sorted(by_name.items()):
        if name in quarantined:
            excluded[name] = "quarantined"
        elif node.out_of_service:
            excluded[name] = f"{node.display_state}" + (f": {node.reason}" if node.reason else "")
        elif name in unhealthy:
            excluded[name] = f"unhealthy: {unhealthy[name]}"
        elif 0 < node.cpus < tasks:
            # srun could not create the step ("More processors requested than permitted")
            excluded[name] = f"{node.cpus} CPUs, too few for {tasks} {what}"
        elif settings.request_gres and node.gpus_total < settings.gpus_per_node:
            # the job's --gres would wait for this node forever
            excluded[name] = (f"{node.gpus_total} GPUs, fewer than the {settings.gpus_per_node} "
                              "of [launch] gpus_per_node")
    chosen: list[str] = []
    if nodelist:
        unknown = [x for x in nodelist if x not in by_name]
        if unknown:
            raise UsageError(f"--nodelist names nodes not in {where}: {fold(unknown)}")
        bad = [x for x in nodelist if x in excluded]
        if bad:
            raise UsageError(
                "--nodelist names nodes that cannot run jobs: "
                + "; ".join(f"{x} ({excluded[x]})" for x in bad)
            )
        if len(nodelist) != n:
            raise UsageError(f"--nodelist names {len(nodelist)} nodes but --nodes is {n}")
        chosen = list(nodelist)
    available = len(by_name) - len(excluded)
    if available < n:
        why = "; ".join(f"{k} ({v})" for k, v in list(excluded.items())[:8])
        more = f" and {len(excluded) - 8} more" if len(excluded) > 8 else ""
        raise Refused(f"refusing to launch: {n} nodes needed, {available} of {len(by_name)} in {where} "
                      f"usable; excluded: {why}{more}")
    trainer_nodes = n - m
    refuse_unfit(job_config, settings, trainer_nodes)
    job_config.trainer.world_size = trainer_nodes * settings.tasks_per_node
    job_config.run_id = run_id
    from training.config import dump_toml, validate

    try:
        validate(job_config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    job_dir = cluster_path(settings, run_dir)
    workdir = settings.workdir or (str(job_dir) if settings.cluster_runs_dir else "")
    params = ScriptParams(
        run_id=_check_safe("run id", run_id),
        run_dir=_check_safe("run directory", str(job_dir)),
        job_name=f"rl-{run_id}",
        nodes=n,
        inference_nodes=m,
        trainer_nodes=trainer_nodes,
        tasks_per_node=settings.tasks_per_node,
        time_limit=_check_safe("time_limit", settings.time_limit),
        signal_before_s=settings.signal_before_s,
        checkpoint_grace_s=settings.checkpoint_grace_s,
        python=_check_safe("launch.python", settings.python),
        partition=_check_safe("partition", partition) if partition else "",
        nodelist=fold(chosen) if chosen else "",
        exclude=fold(excluded) if excluded and not chosen else "",
        gres=f"gpu:{settings.gpu_type}:{settings.gpus_per_node}" if settings.request_gres else "",
        # sbatch's default (the submitting shell's directory) may not exist on the nodes
        workdir=_check_safe("launch.workdir", workdir) if workdir else "",
        ib_hcas=",".join(settings.ib_hcas),
        ib_sysfs=_check_safe("launch.ib_sysfs", settings.ib_sysfs),
        nccl_socket_ifname=(_check_safe("launch.nccl_socket_ifname", settings.nccl_socket_ifname)
                            if settings.nccl_socket_ifname else ""),
        vllm=vllm_params(settings, job_config, job_dir),
        inference_restarts=job_config.inference.max_restarts,
        sft_ranks=bool(job_config.sft.enabled and job_config.sft.dataset),
        sft_marker=_sft_marker(job_config),
    )
    return LaunchPlan(
        run_id=run_id,
        run_dir=run_dir,
        job_config=job_config,
        nodes=n,
        inference_nodes=m,
        excluded=excluded,
        nodelist=chosen,
        script=render_script(params),
        settings=settings,
        config_text=dump_toml(job_config),
    )


def _sft_marker(job_config: Any) -> str:
    """The marker of the SFT stage's committed output, relative to the run directory ("" when the
    stage has nothing to do): the batch script skips the stage once it exists."""
    from training.fsutil import STABLE
    from training.rundir import RunDir

    out = RunDir(Path(".")).sft_output(job_config)
    return str(out / STABLE) if out is not None else ""


def cluster_path(settings: LaunchSection, run_dir: Path) -> Path:
    """The run directory as the job sees it: under cluster_runs_dir when this host reaches the share
    elsewhere, so the directory must then lie under runs_dir (else the nodes cannot see it)."""
    if not settings.cluster_runs_dir:
        return run_dir
    host_root = Path(settings.runs_dir).absolute()
    try:
        rel = run_dir.relative_to(host_root)
    except ValueError:
        raise UsageError(f"{run_dir} is not under [launch] runs_dir {host_root}, the only directory the "
                         f"nodes see (as {settings.cluster_runs_dir})") from None
    return Path(settings.cluster_runs_dir) / rel


def vllm_params(settings: LaunchSection, job_config: Any, run_dir: Path) -> VllmParams | None:
    """The vLLM servers the job starts: for inference.backend = "vllm" without inference.urls."""
    ic = job_config.inference
    if ic.backend != "vllm" or ic.urls:
        return None  # the built-in server, or external servers the orchestrator is pointed at
    tp = ic.tensor_parallel_size
    if settings.gpus_per_node % tp:
        raise ConfigError(f"inference.tensor_parallel_size: {tp} does not divide the "
                          f"{settings.gpus_per_node} GPUs of a node ([launch] gpus_per_node)")
    from training.rundir import RunDir

    return VllmParams(
        model=_check_safe("vLLM model directory", str(RunDir(run_dir).initial_model(job_config))),
        served_model_name=_check_safe("inference.served_model_name", ic.served_model_name),
        tensor_parallel_size=tp,
        replicas_per_node=settings.gpus_per_node // tp,
        port=ic.vllm_port,
        dtype=job_config.model.dtype,
        gpu_memory_utilization=ic.gpu_memory_utilization,
        max_model_len=ic.max_model_len,
        update_weights_path=_check_safe("inference.update_weights_path", ic.update_weights_path),
        ready_timeout_s=round(ic.ready_timeout_s),
        extra_args=list(ic.vllm_args),
    )


# -- I/O around the pure planning ------------------------------------------------------------
@dataclass
class LaunchContext:
    config: Any  # opsctl.config.Config
    settings: LaunchSection
    backend: Any  # opsctl.slurm.SlurmBackend
    partition: str | None


def load_context(config_path: str | None) -> LaunchContext:
    import opsctl.launch.settings  # noqa: F401 - registers [launch]
    from opsctl.config import load_config
    from opsctl.slurm import backend_from_config

    cfg = load_config(config_path)
    settings = cfg.section("launch", LaunchSection)
    partition = settings.partition or cfg.slurm.partition
    return LaunchContext(cfg, settings, backend_from_config(cfg), partition)


def partition_nodes(ctx: LaunchContext) -> list[Node]:
    nodes = ctx.backend.nodes(None)
    if ctx.partition:
        nodes = [n for n in nodes if ctx.partition in n.partitions]
        if not nodes:
            raise ConfigError(f"partition {ctx.partition!r} has no nodes")
    return list(nodes)


def health_exclusions(ctx: LaunchContext, names: list[str]) -> dict[str, str]:
    """node -> failing check codes, from one `opsctl health` pass over the candidates."""
    if ctx.settings.health_source == "none" or not names:
        return {}
    from opsctl.health.service import load_context as health_context
    from opsctl.health.service import make_source, run_health

    hctx = health_context(str(ctx.config.path) if ctx.config.path else None)
    try:
        result = run_health(hctx, names, make_source(hctx, ctx.settings.health_source))
    except Unreachable as exc:
        raise Unreachable(f"health gate: {exc} (launch.health_source = \"none\" launches on Slurm "
                          "state and the quarantine alone)") from None
    out: dict[str, str] = {}
    for report in result.reports:
        status = report.status.value
        if status == "FAIL" or (status == "UNKNOWN" and ctx.settings.exclude_unknown):
            codes = sorted({v.code for v in report.verdicts if v.status.value == status})
            out[report.node] = f"{status} {','.join(codes)}".strip()
    return out


def new_run_id() -> str:
    from opsctl.launch.local import new_run_id as make

    return make()


def prepare(ctx: LaunchContext, req: LaunchRequest) -> LaunchPlan:
    job_config = resolve_job_config(req)
    run_id = job_config.run_id or new_run_id()
    run_dir = Path(req.run_dir) if req.run_dir else Path(ctx.settings.runs_dir) / run_id
    run_dir = run_dir.absolute()
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UsageError(f"{run_dir} already holds a run; choose another run id or directory")
    nodelist = None
    if req.nodelist:
        from opsctl.health.service import expand_nodes

        nodelist = expand_nodes(req.nodelist)
    nodes = partition_nodes(ctx)
    quarantine = Quarantine.load(ctx.settings.quarantine_file)
    usable = [n.name for n in nodes if not n.out_of_service and n.name not in quarantine.nodes]
    if nodelist:
        usable = [x for x in usable if x in nodelist]
    n_needed = req.nodes if req.nodes is not None else (len(nodelist) if nodelist else ctx.settings.nodes)
    unhealthy = health_exclusions(ctx, usable) if n_needed <= len(nodes) else {}
    return plan_layout(
        ctx.settings, job_config, nodes, quarantine.nodes, unhealthy,
        run_id=run_id, run_dir=run_dir, nodes=req.nodes, inference_nodes=req.inference_nodes,
        nodelist=nodelist, partition=ctx.partition,
    )


def submit(ctx: LaunchContext, plan: LaunchPlan, staged: StagedEnvironment | None = None) -> Submitted:
    """Create the run directory, write config, script and ledger (and move the run's installed
    environment in), then sbatch."""
    from opsctl.launch.local import write_config
    from training.rundir import RunDir

    run = RunDir(plan.run_dir)
    write_config(run, plan.job_config)
    if staged is not None:
        staged.commit(plan.run_dir)
    run.logs.mkdir(parents=True, exist_ok=True)
    (plan.run_dir / "job.sbatch").write_text(plan.script)
    ledger = Ledger(
        run_id=plan.run_id,
        run_dir=str(plan.run_dir),
        nodes_requested=plan.nodes,
        inference_nodes=plan.inference_nodes,
        excluded=dict(plan.excluded),
        submitted_at=round(time.time(), 3),
    )
    try:
        job_id = ctx.backend.submit(plan.script)
    except OpsctlError as exc:
        ledger.final_state = "SUBMIT_FAILED"
        ledger.save()
        raise type(exc)(f"sbatch failed for run {plan.run_id}: {exc}") from None
    ledger.job_ids.append(job_id)
    ledger.save()
    return Submitted(plan.run_id, plan.run_dir, job_id, ledger)


def describe(plan: LaunchPlan) -> str:
    lines = [
        f"# run {plan.run_id} in {plan.run_dir}",
        f"# {plan.nodes} nodes: {plan.inference_nodes} inference, "
        f"{plan.nodes - plan.inference_nodes} trainer",
    ]
    if plan.excluded:
        lines.append(f"# excluded: {'; '.join(f'{k} ({v})' for k, v in plan.excluded.items())}")
    return "\n".join(lines)


def run_cli(
    config_path: str | None, req: LaunchRequest, dry_run: bool, as_json: bool
) -> tuple[str, dict[str, Any]]:
    """What `opsctl launch rl-run` (without --local) does: the text to print and a JSON summary."""
    import json

    try:
        ctx = load_context(config_path)
        plan = prepare(ctx, req)
    except OpsctlError as exc:
        if exc.exit_code != EXIT_UNKNOWN:
            raise
        # No Slurm here: say how to run without it.
        raise type(exc)(f"{exc} (no Slurm to submit to; --local runs the job on this machine)",
                        exit_code=exc.exit_code) from None
    staged = stage(plan.job_config, ctx.settings.python)
    info: dict[str, Any] = {
        "run_id": plan.run_id,
        "run_dir": str(plan.run_dir),
        "nodes": plan.nodes,
        "inference_nodes": plan.inference_nodes,
        "excluded": plan.excluded,
        "dry_run": dry_run,
    }
    if dry_run:
        staged.discard()
        if as_json:
            info.update(script=plan.script, config=plan.config_text)
            return json.dumps(info), info
        return f"{describe(plan)}\n{plan.script}\n# resolved config\n{plan.config_text}", info
    done = submit(ctx, plan, staged)
    info["job_id"] = done.job_id
    if as_json:
        return json.dumps(info), info
    text = (f"run {done.run_id}: submitted job {done.job_id} ({plan.nodes} nodes, "
            f"{len(plan.excluded)} excluded); watch it with `opsctl watch {done.run_dir}`")
    return text, info
