"""`opsctl launch rl-run --plan`: what one trainer GPU holds for the configured model and layout,
what the ranks exchange per step, and what publishing a policy version costs; refuses a layout
that does not fit the GPU. Torch-free: it runs on a login node with the lean install.

The model is counted from its config.json (or the tiny model's fields). Per trainer GPU, with P
parameters, FSDP over S GPUs, master bytes m (trainer.master_dtype), compute bytes c
(trainer.compute_dtype):

- parameters P*m/S, gradients P*m/S, AdamW's two moments 2*P*m/S;
- gathered: the root module's embeddings and head stay unsharded in c for the step, and FSDP2
  gathers one decoder layer ahead (two layers in c), plus the layer's unsharded gradient in c and
  its reduce-scatter copy in m;
- activations for one micro-batch of T tokens (orchestrator.micro_batch_tokens): per layer what
  autograd keeps (ACT_* below, fitted on CPU against torch's profiler), all layers without
  activation checkpointing, else each layer's input plus one layer;
- log-prob chunks: LOGIT_COPIES float32 copies of chunk x vocabulary;
- optimizer step: AdamW's foreach temporaries, OPT_TEMP master-sized copies; the step's peak is
  the larger of backward (gradients, gathered, activations, logits) and the optimizer step.

S is trainer.shard_gpus (HSDP: shards within groups, replicated across them), else every trainer
GPU. Not modelled: expert parallelism (not built: every rank holds 1/S of every expert), CUDA
context, NCCL buffers and allocator fragmentation (the fit check keeps HEADROOM free), the
inference side (vLLM sizes its own KV cache).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Per token and layer, in units of the compute dtype, what autograd keeps (fitted on CPU against
# torch's profiler, transformers 5, SDPA with the packed block mask: it keeps no row x row attention
# weights, halving the row width left the peak unchanged; tests/integration/training/test_memory_plan.py).
ACT_HIDDEN = 12  # x hidden: layer input, norms, residual adds, attention output and its softmax state
ACT_QKV = 2  # x (q + k + v) width: before and after the rotary embedding
ACT_MLP = 4.5  # x intermediate: gate, up, activation, product (per routed expert a token visits)
LOGIT_COPIES = 4  # float32 chunk x vocabulary copies alive in the chunked log-prob backward
OPT_TEMP = 1.25  # master-sized temporaries of AdamW's foreach step
HEADROOM = 0.10  # of GPU memory kept free for the CUDA context, NCCL buffers and fragmentation


class PlanError(ValueError):
    """A model the planner cannot count (unknown config keys)."""


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    dense_layers: int  # the first layers with a dense MLP (all, for a dense model)
    experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    attention_bias: bool = False
    qk_norm: bool = False
    tied: bool = False

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelShape:
        """From a Hugging Face config.json (dense decoders, glm4_moe)."""
        try:
            kind = str(cfg["model_type"])
            hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
            layers = int(cfg["num_hidden_layers"])
            moe = kind == "glm4_moe"
            return cls(
                model_type=kind,
                vocab=int(cfg["vocab_size"]),
                hidden=hidden,
                layers=layers,
                heads=heads,
                kv_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                intermediate=int(cfg["intermediate_size"]),
                dense_layers=min(layers, int(cfg.get("first_k_dense_replace", 0))) if moe else layers,
                experts=int(cfg.get("n_routed_experts", 0)) if moe else 0,
                top_k=int(cfg.get("num_experts_per_tok", 0)) if moe else 0,
                moe_intermediate=int(cfg.get("moe_intermediate_size", 0)) if moe else 0,
                shared_experts=int(cfg.get("n_shared_experts", 0)) if moe else 0,
                attention_bias=bool(cfg.get("attention_bias", False)),
                qk_norm=kind == "qwen3" or bool(cfg.get("use_qk_norm", False)),
                tied=bool(cfg.get("tie_word_embeddings", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"config.json: cannot size the model ({exc})") from None

    @classmethod
    def from_job(cls, job: Any) -> ModelShape:
        """The job's model: model.path's config.json, else the tiny model its fields build."""
        m = job.model
        if m.path:
            return cls.from_hf(json.loads((Path(m.path) / "config.json").read_text()))
        from training.tokens import vocab_size

        moe = m.arch == "glm4_moe"
        dense = min(1, m.num_hidden_layers) if moe else m.num_hidden_layers
        return cls(
            model_type=m.arch, vocab=vocab_size(m.vocab), hidden=m.hidden_size, layers=m.num_hidden_layers,
            heads=m.num_attention_heads, kv_heads=m.num_key_value_heads, head_dim=m.head_dim,
            intermediate=m.intermediate_size, dense_layers=dense,
            experts=m.n_routed_experts if moe else 0, top_k=m.num_experts_per_tok if moe else 0,
            moe_intermediate=m.moe_intermediate_size if moe else 0, shared_experts=1 if moe else 0,
            attention_bias=moe, qk_norm=m.arch == "qwen3", tied=False,
        )

    # -- parameters ----------------------------------------------------------------------------
    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    def attention_params(self) -> int:
        h, d = self.hidden, self.head_dim
        n = h * self.qkv_width + self.heads * d * h
        n += self.qkv_width if self.attention_bias else 0
        n += 2 * d if self.qk_norm else 0
        return n + 2 * h  # the layer's two norms

    def mlp_params(self, layer: int) -> int:
        h = self.hidden
        if layer < self.dense_layers:
            return 3 * h * self.intermediate
        router = self.experts * h + self.experts  # weight and the score-correction bias
        return router + 3 * h * self.moe_intermediate * (self.experts + self.shared_experts)

    def layer_params(self, layer: int) -> int:
        return self.attention_params() + self.mlp_params(layer)

    @property
    def root_params(self) -> int:
        """Embeddings, final norm and head: the root FSDP module's own parameters."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def total(self) -> int:
        return self.root_params + sum(self.layer_params(i) for i in range(self.layers))

    @property
    def active(self) -> int:
        """Parameters one token uses: the routed experts it visits, not all of them."""
        idle = (self.experts - self.top_k) * 3 * self.hidden * self.moe_intermediate
        return self.total - idle * (self.layers - self.dense_layers)

    # -- activations ---------------------------------------------------------------------------
    def layer_activation_elems(self, layer: int, tokens: int) -> int:
        """What autograd keeps for one decoder layer over `tokens` tokens (any row width)."""
        per_token: float = ACT_HIDDEN * self.hidden + ACT_QKV * self.qkv_width
        if layer < self.dense_layers:
            per_token += ACT_MLP * self.intermediate
        else:
            per_token += ACT_MLP * self.moe_intermediate * (self.top_k + self.shared_experts)
            per_token += 2 * self.experts  # router logits and scores
        return int(per_token * tokens)


@dataclass(frozen=True)
class TrainLayout:
    trainer_gpus: int
    shard_gpus: int  # FSDP shards over groups of these, replicated across groups (HSDP)
    micro_batch_tokens: int
    row_tokens: int
    chunk_tokens: int  # 0: the whole micro-batch's logits at once
    checkpointing: bool
    master_bytes: int
    compute_bytes: int
    serving_bytes: int
    micro_batches_per_step: int


@dataclass
class MemoryPlan:
    parameters: int
    gradients: int
    optimizer: int
    gathered: int
    activations: int
    logits: int
    optimizer_step: int
    peak: int

    @property
    def backward(self) -> int:
        return self.gradients + self.gathered + self.activations + self.logits


def memory(shape: ModelShape, lay: TrainLayout) -> MemoryPlan:
    """Bytes one trainer GPU holds at its peak (module docstring)."""
    p, s, m, c = shape.total, lay.shard_gpus, lay.master_bytes, lay.compute_bytes
    params, grads, optim = p * m // s, p * m // s, 2 * p * m // s
    biggest = max(shape.layer_params(i) for i in range(shape.layers))
    gathered = 0
    if s > 1:
        gathered = (shape.root_params + 2 * biggest) * c + biggest * (c + m)
    t = lay.micro_batch_tokens
    per_layer = [shape.layer_activation_elems(i, t) * c for i in range(shape.layers)]
    # with checkpointing: every layer's input, and one layer recomputed at a time in backward
    acts = shape.layers * t * shape.hidden * c + max(per_layer) if lay.checkpointing else sum(per_layer)
    chunk = min(lay.chunk_tokens or t, t)
    logits = LOGIT_COPIES * chunk * shape.vocab * 4
    step = int(OPT_TEMP * p * m / s)
    backward = grads + gathered + acts + logits
    return MemoryPlan(params, grads, optim, gathered, acts, logits, step,
                      params + optim + max(backward, grads + step))


@dataclass
class Plan:
    model: str
    parameters: int
    active_parameters: int
    layout: dict[str, Any]
    memory: dict[str, int]
    per_gpu_bytes: int
    gpu_bytes: int
    usable_bytes: int
    fits: bool
    allgather_bytes_per_step: int
    reduce_scatter_bytes_per_step: int
    publish_bytes: int
    publish_s: float
    not_modelled: list[str]


NOT_MODELLED = [
    "expert parallelism (not built: each rank holds 1/S of every expert)",
    "CUDA context, NCCL buffers, allocator fragmentation (kept as headroom)",
    "inference memory (vLLM sizes its KV cache itself)",
]


def build_plan(shape: ModelShape, lay: TrainLayout, gpu_mib: int, trainer_nodes: int,
               node_write_gbps: float) -> Plan:
    mem = memory(shape, lay)
    s, p = lay.shard_gpus, shape.total
    frac = (s - 1) / s if s > 1 else 0.0
    mbs = lay.micro_batches_per_step
    # forward gathers every layer, backward gathers it again (resharded after forward); gradients
    # are reduce-scattered in the master dtype once per micro-batch, within a shard group; under
    # HSDP each shard is then all-reduced across the replica groups (counted with reduce-scatter)
    allgather = int(2 * p * lay.compute_bytes * frac) * mbs
    replicas = lay.trainer_gpus // s
    across = 2 * p * lay.master_bytes / s * (replicas - 1) / replicas if replicas > 1 else 0.0
    reduce_scatter = int(p * lay.master_bytes * frac + across) * mbs
    publish = p * lay.serving_bytes
    gpu = gpu_mib * 2**20
    usable = int(gpu * (1 - HEADROOM))
    return Plan(
        model=shape.model_type,
        parameters=p,
        active_parameters=shape.active,
        layout=asdict(lay),
        memory=asdict(mem),
        per_gpu_bytes=mem.peak,
        gpu_bytes=gpu,
        usable_bytes=usable,
        fits=mem.peak <= usable,
        allgather_bytes_per_step=allgather,
        reduce_scatter_bytes_per_step=reduce_scatter,
        publish_bytes=publish,
        publish_s=publish / (max(1, trainer_nodes) * node_write_gbps * 1e9),
        not_modelled=list(NOT_MODELLED),
    )


def layout_for(job: Any, trainer_nodes: int, tasks_per_node: int, gpu: bool = True) -> TrainLayout:
    """The trainer's layout for `job` on `trainer_nodes` nodes (the trainer's own auto choices on GPUs)."""
    tc, oc = job.trainer, job.orchestrator
    world = trainer_nodes * tasks_per_node
    if tc.shard_gpus and world % tc.shard_gpus:
        raise PlanError(f"trainer.shard_gpus {tc.shard_gpus} does not divide the {world} trainer GPUs")
    compute = job.model.dtype if tc.compute_dtype == "auto" else tc.compute_dtype
    ac = tc.activation_checkpointing == "on" or (tc.activation_checkpointing == "auto" and gpu)
    # a step's rollouts: batch_groups x group_size sequences of up to inference.max_tokens
    # completion tokens; prompts are counted as long as completions (the planner's assumption)
    step_tokens = oc.batch_groups * oc.group_size * 2 * job.inference.max_tokens
    mbs = max(1, math.ceil(step_tokens / (oc.micro_batch_tokens * world)))
    return TrainLayout(
        trainer_gpus=world, shard_gpus=tc.shard_gpus or world, micro_batch_tokens=oc.micro_batch_tokens,
        row_tokens=oc.pack_row_tokens, chunk_tokens=tc.logprob_chunk_tokens, checkpointing=ac,
        master_bytes=DTYPE_BYTES[tc.master_dtype], compute_bytes=DTYPE_BYTES[compute],
        serving_bytes=DTYPE_BYTES[job.model.dtype], micro_batches_per_step=mbs,
    )


def describe(plan: Plan) -> str:
    m, lay = plan.memory, plan.layout

    def gib(n: float) -> str:
        return f"{n / GIB:8.2f} GiB"

    def count(n: int) -> str:
        return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"

    lines = [
        f"model {plan.model}: {count(plan.parameters)} parameters ({count(plan.active_parameters)} "
        "active per token)",
        f"trainer: {lay['trainer_gpus']} GPUs, sharded over groups of {lay['shard_gpus']}; micro-batch "
        f"{lay['micro_batch_tokens']} tokens in rows of {lay['row_tokens']}, activation checkpointing "
        f"{'on' if lay['checkpointing'] else 'off'}, {lay['micro_batches_per_step']} micro-batches per step",
        "per trainer GPU:",
        f"  parameters    {gib(m['parameters'])}",
        f"  gradients     {gib(m['gradients'])}",
        f"  optimizer     {gib(m['optimizer'])}",
        f"  gathered      {gib(m['gathered'])}",
        f"  activations   {gib(m['activations'])}",
        f"  log-probs     {gib(m['logits'])}",
        f"  optimizer step{gib(m['optimizer_step'])} (temporaries, instead of backward's)",
        f"  peak          {gib(plan.per_gpu_bytes)} of {gib(plan.usable_bytes).strip()} usable "
        f"({gib(plan.gpu_bytes).strip()} less {HEADROOM:.0%})",
        f"per GPU per step: all-gather {plan.allgather_bytes_per_step / GIB:.1f} GiB, reduce-scatter "
        f"{plan.reduce_scatter_bytes_per_step / GIB:.1f} GiB",
        f"publish: {plan.publish_bytes / GIB:.1f} GiB per version, about {plan.publish_s:.1f} s",
        "not modelled: " + "; ".join(plan.not_modelled),
    ]
    return "\n".join(lines)


def refuse_unfit(job: Any, settings: Any, trainer_nodes: int) -> None:
    """The launch gate's memory check: a layout the planner says cannot fit the GPU is refused before
    anything is submitted (exit 2), with the peak and the way to see the whole plan."""
    from opsctl.errors import ConfigError

    try:
        shape = ModelShape.from_job(job)
    except OSError:
        return  # no checkpoint to size: the launch's config check refuses model.path before this
    try:
        lay = layout_for(job, trainer_nodes, settings.tasks_per_node)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    plan = build_plan(shape, lay, settings.gpu_memory_mib, trainer_nodes, settings.node_write_gbps)
    if not plan.fits:
        raise ConfigError(f"the layout does not fit the GPU: {plan.per_gpu_bytes / GIB:.1f} GiB per trainer "
                          f"GPU, {plan.usable_bytes / GIB:.1f} GiB usable; see opsctl launch rl-run --plan")


def plan_cli(config_path: str | None, job_file: str | None, overrides: list[str], nodes: int | None,
             inference_nodes: int | None, as_json: bool) -> tuple[str, bool]:
    """`opsctl launch rl-run --plan`: the text (or JSON) to print and whether the layout fits.
    Reads opsctl.toml's [launch] and the job; contacts no Slurm."""
    import opsctl.launch.settings  # noqa: F401 - registers [launch]
    from opsctl.config import load_config
    from opsctl.errors import UsageError
    from opsctl.launch.settings import LaunchSection
    from opsctl.launch.slurm import LaunchRequest, inference_share, resolve_job_config

    settings = load_config(config_path).section("launch", LaunchSection)
    job = resolve_job_config(LaunchRequest(job_file, overrides))
    n = nodes if nodes is not None else settings.nodes
    m = inference_nodes if inference_nodes is not None else inference_share(settings, n)
    if n < 2 or not 1 <= m < n:
        raise UsageError(f"--plan needs at least one inference and one trainer node, got {n} nodes, "
                         f"{m} for inference")
    try:
        shape = ModelShape.from_job(job)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    try:
        lay = layout_for(job, n - m, settings.tasks_per_node)
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    plan = build_plan(shape, lay, settings.gpu_memory_mib, n - m, settings.node_write_gbps)
    if as_json:
        return json.dumps(asdict(plan)), plan.fits
    verdict = "fits" if plan.fits else ("does NOT fit: shard over more GPUs (trainer.shard_gpus), more "
                                        "trainer nodes, or a smaller micro-batch")
    return f"{describe(plan)}\nlayout: {n} nodes ({m} inference, {n - m} trainer): {verdict}", plan.fits
