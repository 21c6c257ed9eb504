"""The sbatch script of an RL run, rendered from templates/rl_run.sbatch.j2."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


@dataclass
class VllmParams:
    """vLLM on the inference nodes: replicas_per_node replicas of tensor_parallel_size GPUs each."""

    model: str  # checkpoint directory vLLM loads (the run's SFT output, or model.path)
    served_model_name: str
    tensor_parallel_size: int
    replicas_per_node: int
    port: int  # replica r of a node listens on port + r
    dtype: str
    gpu_memory_utilization: float
    max_model_len: int  # 0: not passed (the model's own)
    update_weights_path: str
    ready_timeout_s: int
    extra_args: list[str] = field(default_factory=list)


@dataclass
class ScriptParams:
    run_id: str
    run_dir: str
    job_name: str
    nodes: int
    inference_nodes: int
    trainer_nodes: int
    tasks_per_node: int
    time_limit: str
    signal_before_s: int
    checkpoint_grace_s: int
    python: str
    partition: str = ""
    nodelist: str = ""  # folded node set, when the user named the nodes
    exclude: str = ""  # folded node set
    gres: str = ""
    workdir: str = ""
    ib_hcas: str = ""  # comma-separated; empty: discover at job start
    ib_sysfs: str = "/sys/class/infiniband"
    nccl_socket_ifname: str = ""
    vllm: VllmParams | None = None  # None: the built-in inference server
    inference_restarts: int = 3  # inference.max_restarts
    sft_ranks: bool = False  # chat SFT (sft.dataset): SFT runs as the trainer's ranks
    sft_marker: str = "sft/final/STABLE"  # the SFT stage's commit marker, under the run dir ("": no stage)


def render_script(params: ScriptParams) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # a shell script, not HTML; values are quoted with the q filter
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env.get_template("rl_run.sbatch.j2").render(**vars(params))
