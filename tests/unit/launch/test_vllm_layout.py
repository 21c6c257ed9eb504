"""The vLLM inference layout `opsctl launch rl-run` renders (pure planning, nothing submitted)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from launch_unit_helpers import DEMO, partition

from opsctl.errors import ConfigError
from opsctl.launch.settings import LaunchSection
from opsctl.launch.slurm import plan_layout
from training.config import load_config

RUN = Path("/shared/runs/r1")


def script(settings: LaunchSection, *overrides: str) -> str:
    cfg = load_config(DEMO, ["inference.backend=vllm", "model.path=/shared/models/m", *overrides])
    return plan_layout(settings, cfg, partition(64), set(), {}, run_id="r1", run_dir=RUN).script


def test_tp8_is_one_replica_per_node_on_all_its_gpus(production: LaunchSection) -> None:
    text = script(production, "inference.tensor_parallel_size=8", "sft.enabled=false")
    assert "export VLLM_TP=8" in text and "VLLM_REPLICAS=1\n" in text
    assert "--model /shared/models/m " in text  # no SFT: vLLM serves model.path
    assert "--inference-servers \"$INFERENCE_SERVERS\"" in text
    assert "training.inference --run-dir" not in text  # the built-in server is not started


def test_replica_gpu_groups_cover_the_node_once(production: LaunchSection) -> None:
    # The per-task program of the rendered srun line, run as Slurm would for each local rank (tp=2).
    text = script(production, "inference.tensor_parallel_size=2")
    program = re.search(r"bash -c '(.*?)' vllm", text, re.DOTALL)
    assert program is not None
    seen = [
        subprocess.run(["bash", "-c", program.group(1), "vllm", "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES $*"',
                        "sh", "--model", "m"],
                       capture_output=True, text=True, check=True,
                       env={"SLURM_LOCALID": str(r), "VLLM_TP": "2", "VLLM_PORT": "8000",
                            "PATH": "/usr/bin:/bin"}).stdout.strip()
        for r in range(4)
    ]
    assert seen == ["0,1 --model m --port 8000", "2,3 --model m --port 8001",
                    "4,5 --model m --port 8002", "6,7 --model m --port 8003"]


def test_tp_that_does_not_divide_the_node_is_refused(production: LaunchSection) -> None:
    with pytest.raises(ConfigError, match=r"tensor_parallel_size: 3 does not divide the 8 GPUs"):
        script(production, "inference.tensor_parallel_size=3")


def test_external_servers_are_not_started_by_the_job(production: LaunchSection) -> None:
    text = script(production, 'inference.urls=["http://infer-1:8000"]')
    assert "vllm.entrypoints" not in text


def test_vllm_args_are_quoted(production: LaunchSection) -> None:
    text = script(production, 'inference.vllm_args=["--override-generation-config", "{\\"x\\": 1}"]')
    assert "--override-generation-config '{\"x\": 1}' &" in text
