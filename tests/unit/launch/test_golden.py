"""The `--dry-run` script for the 64-node production layout, byte for byte.

Regenerate after a deliberate template change with OPSCTL_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

from launch_unit_helpers import DEMO, GOLDEN, partition

from opsctl.launch.settings import LaunchSection
from opsctl.launch.slurm import LaunchRequest, plan_layout, resolve_job_config


def render(production: LaunchSection) -> str:
    nodes = partition(66)
    nodes[6].flags, nodes[6].reason = {"DRAIN"}, "opsctl:gpu-xid:xid 79 on gpu 3"
    cfg = resolve_job_config(LaunchRequest(config=str(DEMO)))
    plan = plan_layout(production, cfg, nodes, {"gpu-012"}, {}, run_id="intellect3-rl",
                       run_dir=Path("/shared/runs/intellect3-rl"), partition="gpu")
    return plan.script


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("OPSCTL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; review and set OPSCTL_UPDATE_GOLDEN=1 to update"


def test_production_64_node_script(production: LaunchSection) -> None:
    check("rl_run_64_nodes.sbatch", render(production))


def test_production_script_with_fixed_hcas(production: LaunchSection) -> None:
    production.ib_hcas = [f"mlx5_{i}:1" for i in range(8)]
    production.nccl_socket_ifname = "bond0"
    check("rl_run_64_nodes_fixed_hcas.sbatch", render(production))


def render_vllm(production: LaunchSection, overrides: list[str]) -> str:
    """The same 64-node layout with vLLM serving the 16 inference nodes."""
    from training.config import load_config

    # model.path is only checked for existence by resolve_job_config; the rendered script names it.
    cfg = load_config(DEMO, ["inference.backend=vllm", "model.path=/shared/models/qwen3-8b",
                             "model.dtype=bfloat16", *overrides])
    nodes = partition(66)
    plan = plan_layout(production, cfg, nodes, {"gpu-012"}, {}, run_id="intellect3-rl",
                       run_dir=Path("/shared/runs/intellect3-rl"), partition="gpu")
    return plan.script


def test_production_script_with_vllm_tp2(production: LaunchSection) -> None:
    # tp=2 on 8-GPU nodes: 4 replicas per node on ports 8000-8003, 64 servers for the orchestrator.
    check("rl_run_64_nodes_vllm_tp2.sbatch",
          render_vllm(production, ["inference.tensor_parallel_size=2", "inference.stop=[\"\\n\"]",
                                   "inference.served_model_name=intellect3-policy",
                                   "inference.max_model_len=4096",
                                   "inference.vllm_args=[\"--enable-chunked-prefill\"]"]))
