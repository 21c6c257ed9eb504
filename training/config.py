"""Job configuration: TOML files plus dotted overrides, validated into one dataclass per section.

This module imports no torch: `opsctl launch` resolves and validates configs before any process
starts, and `opsctl --help` must stay light.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """An unknown key or a bad value; the message names the dotted key."""


@dataclass
class ModelConfig:
    # Local directory with a Hugging Face checkpoint (config.json, weights, tokenizer). Empty means:
    # build a tiny random model of `arch` in the run directory (tests and the CPU demo).
    path: str = ""
    arch: str = "qwen3"  # tiny model's architecture (HF model_type); only used when `path` is empty
    # Tiny model's alphabet: "arith" (digits, lowercase, a few operators) or "text" (printable ASCII,
    # enough for JSON tool calls, with a chat template that renders them in the Hermes form).
    vocab: str = "arith"
    hidden_size: int = 64  # tiny model: hidden (residual stream) width
    intermediate_size: int = 128  # tiny model: inner width of the dense MLPs
    num_hidden_layers: int = 2  # tiny model: number of transformer layers
    num_attention_heads: int = 4  # tiny model: query heads per layer
    num_key_value_heads: int = 2  # tiny model: key/value heads per layer (grouped-query attention)
    head_dim: int = 16  # tiny model: width of each attention head
    # MoE sizes, used by glm4_moe only.
    moe_intermediate_size: int = 32
    n_routed_experts: int = 4  # glm4_moe tiny model: routed experts per MoE layer
    num_experts_per_tok: int = 2  # glm4_moe tiny model: experts each token is routed to
    # Parameter dtype wherever the model is loaded: SFT, the trainer, the built-in inference server,
    # and vLLM's --dtype.
    dtype: str = "float32"


@dataclass
class EnvConfig:
    # A built-in environment (training.envs.REGISTRY), or "vf:<env_id>": an installed verifiers
    # environment (docs/training.md, "verifiers environments").
    name: str = "arithmetic"
    # Passed to the environment's load_environment(**kwargs).
    kwargs: dict[str, Any] = field(default_factory=dict)
    # vf: environments: local package directories or wheels that `opsctl launch` installs, offline and
    # without their dependencies (the runtime must hold those), into the run's environments/.
    packages: list[str] = field(default_factory=list)
    # vf: environments: reference answers `opsctl launch` scores with the rubric; a reward function
    # that raises on any of them fails the launch (verifiers would score every rollout 0). 0: skip.
    check_examples: int = 4


@dataclass
class SFTConfig:
    # Fine-tune on the environment's demonstrations before RL; false: RL starts from model.path
    # (or the tiny random model).
    enabled: bool = True
    steps: int = 100  # most SFT optimizer steps (target_accuracy may stop it earlier)
    batch_size: int = 16  # demonstrations per SFT step
    lr: float = 3e-3  # AdamW peak learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    num_demos: int = 256  # training problems used as demonstrations (a seeded random sample)
    warmup_steps: int = 10  # steps of linear warmup up to lr
    # "cosine": decays to 0 at `steps`; "constant" keeps the peak after warmup, so that where an
    # accuracy target stops SFT does not decide how far the rate had decayed (docs/training.md).
    lr_schedule: str = "cosine"
    # Stop SFT early once the policy's sampled accuracy on `check_size` training problems (at the
    # inference temperature) reaches this; 0 disables. `steps` stays the cap. Why: RL needs a
    # start with headroom, and a fixed step count lands anywhere from 5% to 60% depending on the
    # data draw, which made "RL improves over SFT" a coin toss; a target lands it near one point.
    target_accuracy: float = 0.0
    check_every: int = 25  # SFT steps between accuracy checks (only with target_accuracy > 0)
    check_size: int = 128  # training problems per accuracy check, one sampled completion each
    # A chat dataset (JSONL, one {"messages": [...]} per line, or Parquet) to fine-tune on instead of the
    # environment's demonstrations: rendered with the model's chat template, loss on assistant
    # turns only, packed, on the sharded trainer (all trainer.world_size ranks, trainer.* layout),
    # checkpointed every checkpoint_every steps and resumed from there. batch_size counts
    # conversations; target_accuracy and num_demos do not apply.
    dataset: str = ""
    checkpoint_every: int = 50  # chat SFT: steps between resumable checkpoints
    micro_batch_tokens: int = 2048  # chat SFT: padded tokens per forward/backward
    pack_row_tokens: int = 512  # chat SFT: tokens per packed row (a longer conversation gets its own)


@dataclass
class InferenceConfig:
    # "builtin": the torch engine in training.inference; "vllm": an external OpenAI-compatible server.
    backend: str = "builtin"
    # Address the built-in server binds; its announced URL uses the machine's hostname for 0.0.0.0
    # or empty.
    host: str = "127.0.0.1"
    port: int = 0  # built-in server's port; 0 picks a free port (announced in peers/)
    # External servers (vllm backend): base URLs; empty means discover from the run directory.
    urls: list[str] = field(default_factory=list)
    # HTTP path the orchestrator POSTs {weight_dir, version} to for each new policy; vLLM's middleware
    # serves this path, the built-in server only /update_weights.
    update_weights_path: str = "/update_weights"
    max_batch_size: int = 64  # built-in engine: most sequences decoded per step; the rest wait
    max_tokens: int = 8  # token budget per completion (rollouts, eval, SFT check); longer ones are cut
    # Sampling temperature of rollouts and of SFT's accuracy check (0: greedy); the trainer divides
    # logits by it when recomputing log-probs.
    temperature: float = 1.0
    threads: int = 1  # torch CPU threads of each built-in inference server
    # The "model" of every completion request; vLLM started by `opsctl launch` serves under this name.
    served_model_name: str = "policy"
    # Stop strings sent with every completion request besides the environment's stop_sequences
    # (a completion ends at the first one; both servers also end completions at EOS).
    stop: list[str] = field(default_factory=list)
    # vllm backend with inference.urls empty: `opsctl launch` starts vLLM on the inference nodes.
    # Each replica spans tensor_parallel_size GPUs of one node; a node with G GPUs runs
    # G / tensor_parallel_size replicas, replica r on port vllm_port + r.
    tensor_parallel_size: int = 8
    vllm_port: int = 8000  # port of replica 0 on each inference node
    gpu_memory_utilization: float = 0.9  # vLLM --gpu-memory-utilization: fraction of each GPU's memory
    max_model_len: int = 0  # 0: the model's own context length
    vllm_args: list[str] = field(default_factory=list)  # appended to the vLLM command line as given
    ready_timeout_s: float = 1800.0  # how long the job waits for every replica's GET /health
    # Seconds one completion request may take; a request without an answer by then is a transport
    # failure, retried as orchestrator.request_attempts says.
    request_timeout_s: float = 600.0
    # Times an inference server that dies (killed, crashed) is started again within one attempt of the
    # job; meanwhile its requests fail over to the other replicas, and it rejoins with the current
    # policy. One more death ends the attempt.
    max_restarts: int = 3
    # Built-in engine: keep a KV cache across decode steps (false recomputes the whole prefix).
    kv_cache: bool = True
    # Built-in server's /v1/chat/completions: the format tool calls are read in, as vLLM's
    # --tool-call-parser: "hermes" (<tool_call>{json}</tool_call>), "glm45", or "auto" (by model type).
    tool_call_parser: str = "auto"


@dataclass
class OrchestratorConfig:
    batch_groups: int = 8  # groups (tasks) per trainer step: batch_groups x group_size rollouts
    group_size: int = 8  # completions per task; advantages are relative to the group mean
    # How far generation may run ahead of training, in policy versions: groups for batch t are requested
    # once the servers hold policy >= t - async_level, with at most async_level + 1 batches buffered or
    # in flight. 0: strictly on-policy (and bitwise reproducible).
    async_level: int = 1
    # A group whose oldest policy version is more than this many steps behind the batch (trainer step)
    # it would land in is dropped (continuous: cancelled in flight) and its task re-queued.
    max_off_policy_steps: int = 2
    micro_batch_tokens: int = 2048  # padded tokens (rows x widest row) per trainer forward/backward
    # Samples are packed into rows of at most this many tokens (see docs/training.md, Batching):
    # attention with a dense block-diagonal mask costs the square of the row width.
    pack_row_tokens: int = 256
    normalize_adv_std: bool = False  # divide advantages (reward - group mean) by the group's reward std
    threads: int = 1  # torch CPU threads of the orchestrator process
    # A rollout or eval request that fails in transport (no answer) or with 502/503/504 is tried this
    # many times on its inference replica, then as often on each other replica. Other errors (4xx,
    # malformed answers) fail at once.
    request_attempts: int = 3
    request_backoff_s: float = 0.5  # wait before a replica's second try; doubles per try, at most 10 s
    # A replica that failed every try is tried only after the others for this long, then in turn
    # again; before its next request it is given the current weights (it may have restarted).
    replica_cooldown_s: float = 30.0
    # When every replica fails, a request waits this long for one to come back before the job fails.
    replica_wait_s: float = 600.0
    # "continuous": each group is its own request, up to max_inflight_groups per server, refilled
    # as each finishes; "batch": one request per server per batch, waiting for its slowest
    # completion. "auto": continuous on vLLM, whose decode step costs about the same for 1 or 128
    # sequences, batch on the built-in engine, where a step costs rows x width and a continuously
    # full engine was slower (bench/bench_async.py, bench/bench_scheduling.py). async_level=0
    # always uses "batch": one request per server keeps the engine's batches, and so the
    # log-probs, bitwise reproducible.
    scheduling: str = "auto"
    max_inflight_groups: int = 0  # per server; 0: batch_groups spread over the servers
    # Optional group filters (a filtered group is not trained on; its task is not re-queued).
    filter_zero_advantage: bool = False  # all rewards equal: no learning signal
    filter_too_easy: bool = False  # mean reward >= too_easy_mean_reward
    too_easy_mean_reward: float = 1.0  # filter_too_easy: groups with mean reward >= this are dropped
    filter_too_hard: bool = False  # mean reward <= too_hard_mean_reward
    too_hard_mean_reward: float = 0.0  # filter_too_hard: groups with mean reward <= this are dropped
    # Completions cut off at max_tokens (finish_reason "length") get zero loss weight.
    mask_truncated: bool = True


@dataclass
class EvalConfig:
    # Environments evaluated on their held-out split (registered names, their default kwargs; the
    # training environment's name means it with env.kwargs); empty: the training environment.
    envs: list[str] = field(default_factory=list)
    size: int = 200  # problems per environment (the first `size` of its eval split); 0: no eval
    samples: int = 1  # completions per problem; accuracy is the mean over all of them
    temperature: float = 0.0  # sampling temperature of eval completions; 0: greedy
    # pass@k for each k (at most `samples`): the chance that one of k of a problem's completions is
    # right, estimated without bias from all `samples` (pass@1 is the accuracy).
    pass_k: list[int] = field(default_factory=list)
    # Also every N trainer steps, on the policy the servers hold then, in the background beside the
    # rollouts (the trainer does not wait); 0: only before step 0 and at the end.
    every: int = 0
    at_start: bool = True  # before step 0 (not on resume)
    at_end: bool = True  # after the last step, on the final policy


@dataclass
class TrainerConfig:
    steps: int = 20  # RL steps: optimizer steps, one per rollout batch
    lr: float = 1e-3  # AdamW peak learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # AdamW (beta1, beta2)
    warmup_steps: int = 0  # steps of linear warmup up to lr; 0: none
    # "constant" after warmup, or "cosine" from lr down to min_lr_ratio * lr at the last step.
    lr_schedule: str = "constant"
    min_lr_ratio: float = 0.0  # cosine: final learning rate as a fraction of lr
    max_grad_norm: float = 1.0  # clip the gradients' total L2 norm to this (SFT too)
    # Token-level importance ratio bounds: tokens whose ratio falls outside [low, high] are masked.
    mask_ratio_low: float = 0.125
    mask_ratio_high: float = 8.0  # the upper bound (> 1)
    # Trainer ranks (processes), which share each batch's micro-batches; a local launch starts this
    # many, and `opsctl launch` on Slurm sets it to trainer nodes x tasks per node.
    world_size: int = 1
    checkpoint_every: int = 5  # steps between trainer/orchestrator checkpoints (resume points)
    # Seconds a trainer rank waits for its next rollout batch before the job fails (long chains of
    # thought on a slow inference fleet may need more).
    rollout_wait_s: float = 3600.0
    # Newest published weights/step_N versions kept (at least async_level + 2); older ones are deleted
    # unless a kept trainer checkpoint (the newest two) is at that step: a resume starts from it.
    keep_weights: int = 3
    threads: int = 1  # torch CPU threads per trainer rank (and of SFT)
    backend: str = "auto"  # auto: nccl+FSDP on GPU, gloo on CPU
    # Log-probabilities are computed this many token positions at a time: only one chunk's float32
    # vocabulary logits exist at once (forward and backward); 0: all at once.
    logprob_chunk_tokens: int = 1024
    # Recompute each decoder layer in backward instead of keeping its activations: "auto" on GPUs
    # (long chains of thought), "on", "off" (CPU default: the tiny models' activations are small).
    activation_checkpointing: str = "auto"
    # The dtype of the trainer's sharded parameters, gradients and optimizer state. The published
    # weights (and SFT, and the inference servers) use model.dtype.
    master_dtype: str = "float32"
    # Attention over packed rows: "mask" gives each row a [row, row] block-diagonal mask; "varlen"
    # lays the documents end to end and attends within each (no mask; training/varlen.py).
    attention: str = "mask"
    # FSDP shards each parameter over groups of this many trainer ranks and replicates it across the
    # groups (HSDP; e.g. 8: a node's GPUs, so the per-layer all-gathers stay on NVLink); 0: one
    # group of every rank. The trainer world size must be a multiple.
    shard_gpus: int = 0
    # The dtype the layers compute in under FSDP (its MixedPrecisionPolicy param_dtype; gradients
    # are reduce-scattered in master_dtype): "auto" is model.dtype, e.g. bfloat16 on GPUs.
    compute_dtype: str = "auto"
    # Shard the model with FSDP2: "auto" on GPUs with more than one rank; "on" also on CPU over gloo
    # (the sharded path, proven without GPUs); "off": replicas with all-reduced gradients.
    fsdp: str = "auto"


@dataclass
class MetricsConfig:
    # Prometheus /metrics port per component; 0 picks a free port (written to peers/).
    port: int = 0
    enabled: bool = True  # serve /metrics (trainer rank 0, orchestrator); metrics.jsonl is written either way
    # Address /metrics binds: a multi-node run binds one the monitoring host reaches (0.0.0.0 or the
    # node's own); the announced URL uses the machine's hostname for 0.0.0.0 or empty.
    host: str = "127.0.0.1"
    # Rollouts written to rollouts.jsonl per step (prompt, completion, reward and its components,
    # policy version), one from each of the step's first groups, for `opsctl runs view`; 0: none.
    rollouts_per_step: int = 8


@dataclass
class JobConfig:
    seed: int = 0  # seeds SFT, the tiny model, trainer init, task draws and sampling
    run_id: str = ""  # run name, the default run directory's name; empty: generated at launch
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    orchestrator: OrchestratorConfig = field(default_factory=OrchestratorConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


# Accepted values of the string keys that take one of a few (validate() enforces them; the
# generated reference lists them).
CHOICES = {
    "inference.backend": {"builtin", "vllm"},
    "model.arch": {"qwen3", "glm4_moe", "llama"},
    "model.dtype": {"float32", "bfloat16", "float16"},
    "model.vocab": {"arith", "text"},
    "trainer.master_dtype": {"float32", "bfloat16"},
    "trainer.compute_dtype": {"auto", "float32", "bfloat16", "float16"},
    "trainer.backend": {"auto", "gloo", "nccl"},
    "trainer.activation_checkpointing": {"auto", "on", "off"},
    "trainer.attention": {"mask", "varlen"},
    "trainer.fsdp": {"auto", "on", "off"},
    "inference.tool_call_parser": {"auto", "hermes", "glm45"},
    "orchestrator.scheduling": {"auto", "continuous", "batch"},
    "sft.lr_schedule": {"constant", "cosine"},
    "trainer.lr_schedule": {"constant", "cosine"},
}


def _coerce(key: str, tp: Any, value: Any) -> Any:
    """Check one value against its annotated type; ints are accepted where floats are expected."""
    origin = typing.get_origin(tp)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(f"{key}[{i}]", item, v) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table, got {value!r}")
        return dict(value)
    if origin in (typing.Union, types.UnionType):
        raise ConfigError(f"{key}: unsupported union type")
    raise ConfigError(f"{key}: unsupported type {tp!r}")


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(f"{dotted}: unknown key")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{dotted}: expected a table, got {value!r}")
            kwargs[key] = _build(typing.cast(type, tp), value, f"{dotted}.")
        else:
            kwargs[key] = _coerce(dotted, tp, value)
    return cls(**kwargs)


def _parse_override_value(raw: str) -> Any:
    """Values are TOML literals (1e-4, true, "x", [1, 2]); a bare word is taken as a string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def apply_override(data: dict[str, Any], override: str) -> None:
    if "=" not in override:
        raise ConfigError(f"override {override!r}: expected KEY=VALUE, e.g. trainer.lr=1e-4")
    key, raw = override.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ConfigError(f"override {override!r}: malformed key")
    node = data
    for p in parts[:-1]:
        nxt = node.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{key}: {p} is not a table")
        node = nxt
    node[parts[-1]] = _parse_override_value(raw.strip())


def validate(cfg: JobConfig) -> None:
    """Cross-field and range checks; each error names its key."""
    for key, allowed in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {sorted(allowed)}")
    positive = {
        "sft.steps": cfg.sft.steps if cfg.sft.enabled else 1,
        "sft.batch_size": cfg.sft.batch_size,
        "sft.num_demos": cfg.sft.num_demos,
        "sft.checkpoint_every": cfg.sft.checkpoint_every,
        "sft.micro_batch_tokens": cfg.sft.micro_batch_tokens,
        "sft.pack_row_tokens": cfg.sft.pack_row_tokens,
        "inference.max_batch_size": cfg.inference.max_batch_size,
        "inference.max_tokens": cfg.inference.max_tokens,
        "orchestrator.batch_groups": cfg.orchestrator.batch_groups,
        "orchestrator.micro_batch_tokens": cfg.orchestrator.micro_batch_tokens,
        "orchestrator.pack_row_tokens": cfg.orchestrator.pack_row_tokens,
        "trainer.steps": cfg.trainer.steps,
        "trainer.world_size": cfg.trainer.world_size,
        "trainer.checkpoint_every": cfg.trainer.checkpoint_every,
        "trainer.keep_weights": cfg.trainer.keep_weights,
        "trainer.threads": cfg.trainer.threads,
        "inference.threads": cfg.inference.threads,
        "orchestrator.threads": cfg.orchestrator.threads,
        "model.hidden_size": cfg.model.hidden_size,
        "model.num_hidden_layers": cfg.model.num_hidden_layers,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key}: must be > 0, got {value}")
    shard, world = cfg.trainer.shard_gpus, cfg.trainer.world_size
    if shard < 0 or (shard and world > 1 and world % shard):  # world 1: before a launch sets it
        raise ConfigError(f"trainer.shard_gpus: {shard} must be 0 or divide trainer.world_size "
                          f"({cfg.trainer.world_size})")
    if cfg.orchestrator.group_size < 2:
        raise ConfigError("orchestrator.group_size: must be >= 2 (advantages are relative to the group)")
    _validate_env(cfg)
    if cfg.orchestrator.async_level < 0:
        raise ConfigError("orchestrator.async_level: must be >= 0")
    if cfg.orchestrator.max_off_policy_steps < 0:
        raise ConfigError("orchestrator.max_off_policy_steps: must be >= 0")
    if cfg.orchestrator.max_inflight_groups < 0:
        raise ConfigError("orchestrator.max_inflight_groups: must be >= 0 (0: automatic)")
    for key, value in (("inference.request_timeout_s", cfg.inference.request_timeout_s),
                       ("trainer.rollout_wait_s", cfg.trainer.rollout_wait_s)):
        if not value > 0:
            raise ConfigError(f"{key}: must be > 0")
    if cfg.inference.max_restarts < 0:
        raise ConfigError("inference.max_restarts: must be >= 0")
    if cfg.orchestrator.request_attempts < 1:
        raise ConfigError("orchestrator.request_attempts: must be >= 1")
    for key, value in (("orchestrator.request_backoff_s", cfg.orchestrator.request_backoff_s),
                       ("orchestrator.replica_cooldown_s", cfg.orchestrator.replica_cooldown_s),
                       ("orchestrator.replica_wait_s", cfg.orchestrator.replica_wait_s)):
        if value < 0:
            raise ConfigError(f"{key}: must be >= 0")
    _validate_eval(cfg.eval)
    if cfg.trainer.logprob_chunk_tokens < 0:
        raise ConfigError("trainer.logprob_chunk_tokens: must be >= 0 (0: no chunks)")
    if cfg.metrics.rollouts_per_step < 0:
        raise ConfigError("metrics.rollouts_per_step: must be >= 0")
    if not 0 <= cfg.sft.target_accuracy <= 1:
        raise ConfigError(f"sft.target_accuracy: must be in [0, 1], got {cfg.sft.target_accuracy}")
    if cfg.sft.check_every < 1 or cfg.sft.check_size < 1:
        raise ConfigError("sft.check_every/check_size: must be >= 1")
    for key, value in {"trainer.lr": cfg.trainer.lr, "sft.lr": cfg.sft.lr}.items():
        if not value > 0:
            raise ConfigError(f"{key}: must be > 0, got {value}")
    if cfg.inference.temperature < 0:
        raise ConfigError("inference.temperature: must be >= 0")
    if not 0 < cfg.trainer.mask_ratio_low < 1 < cfg.trainer.mask_ratio_high:
        raise ConfigError("trainer.mask_ratio_low/high: need 0 < low < 1 < high")
    if len(cfg.trainer.betas) != 2 or not all(0 <= b < 1 for b in cfg.trainer.betas):
        raise ConfigError("trainer.betas: need two numbers in [0, 1)")
    if not 0 <= cfg.trainer.min_lr_ratio <= 1:
        raise ConfigError(f"trainer.min_lr_ratio: must be in [0, 1], got {cfg.trainer.min_lr_ratio}")
    if cfg.trainer.max_grad_norm <= 0:
        raise ConfigError("trainer.max_grad_norm: must be > 0")
    if not 0 <= cfg.inference.port < 65536 or not 0 <= cfg.metrics.port < 65536:
        raise ConfigError("inference.port/metrics.port: must be in 0..65535")
    if cfg.inference.backend == "vllm" and not cfg.model.path:
        raise ConfigError("model.path: the vllm backend needs a checkpoint directory it can load")
    # vllm with inference.urls empty: `opsctl launch` starts the servers and announces them in peers/.
    ic = cfg.inference
    if ic.tensor_parallel_size < 1:
        raise ConfigError("inference.tensor_parallel_size: must be >= 1")
    if not 1 <= ic.vllm_port <= 65535 - 64:
        raise ConfigError(f"inference.vllm_port: must be in 1..{65535 - 64}, got {ic.vllm_port}")
    if not 0 < ic.gpu_memory_utilization <= 1:
        raise ConfigError("inference.gpu_memory_utilization: must be in (0, 1]")
    if ic.max_model_len < 0 or ic.ready_timeout_s <= 0:
        raise ConfigError("inference.max_model_len/ready_timeout_s: must be >= 0 / > 0")
    if not ic.served_model_name or any(c.isspace() for c in ic.served_model_name):
        raise ConfigError(f"inference.served_model_name: {ic.served_model_name!r} is empty or has spaces")
    if any(not s for s in ic.stop):
        raise ConfigError("inference.stop: stop strings must not be empty")
    # Late import keeps this module free of the environments' dependencies at import time.
    from training.envs import REGISTRY

    if cfg.env.name not in REGISTRY and not cfg.env.name.startswith("vf:"):
        raise ConfigError(f"env.name: {cfg.env.name!r} is not one of {sorted(REGISTRY)} "
                          "nor vf:<env_id> (a verifiers environment)")


def _validate_eval(ec: EvalConfig) -> None:
    if ec.samples < 1:
        raise ConfigError("eval.samples: must be >= 1")
    for key, value in (("eval.temperature", ec.temperature), ("eval.size", ec.size),
                       ("eval.every", ec.every)):
        if value < 0:
            raise ConfigError(f"{key}: must be >= 0")
    bad = [k for k in ec.pass_k if not 1 <= k <= ec.samples]
    if bad:
        raise ConfigError(f"eval.pass_k: {bad[0]} is not between 1 and eval.samples ({ec.samples})")
    if len(set(ec.envs)) != len(ec.envs):
        raise ConfigError("eval.envs: an environment is named twice")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> JobConfig:
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {p}: not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p}: {exc}") from exc
    for ov in overrides:
        apply_override(data, ov)
    cfg = typing.cast(JobConfig, _build(JobConfig, data, ""))
    validate(cfg)
    return cfg


def config_from_dict(data: dict[str, Any]) -> JobConfig:
    cfg = typing.cast(JobConfig, _build(JobConfig, data, ""))
    validate(cfg)
    return cfg


def to_dict(cfg: JobConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(cfg: JobConfig) -> str:
    """The resolved config as TOML that load_config reads back to an equal JobConfig."""
    data = to_dict(cfg)
    top = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    lines = [*top, ""]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines.extend(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())
            lines.append("")
    return "\n".join(lines)


def _validate_env(cfg: JobConfig) -> None:
    vf = cfg.env.name.startswith("vf:")
    if vf and cfg.sft.enabled and not cfg.sft.dataset:
        raise ConfigError("sft: a vf: environment has no demonstrations; set sft.dataset (chat SFT) "
                          "or sft.enabled = false")
    if cfg.env.packages and not vf:
        raise ConfigError("env.packages: only vf: environments are installed per run")
    if cfg.env.check_examples < 0:
        raise ConfigError("env.check_examples: must be >= 0")
