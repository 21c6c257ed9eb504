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


def serve_loop(text: str) -> str:
    loop = re.search(r"^export SERVE='(.*?)'$", text, re.DOTALL | re.MULTILINE)
    assert loop is not None
    return loop.group(1)


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
                            "SERVE": serve_loop(text), "MAX_RESTARTS": "0",
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


def test_an_inference_server_that_dies_is_started_again_up_to_max_restarts(
    production: LaunchSection, tmp_path: Path
) -> None:
    """The loop every inference server runs under, as rendered: a death (SIGKILL here) starts the
    server again; a clean exit ends the loop with 0; one death more than inference.max_restarts
    ends it with the server's status (srun's --kill-on-bad-exit then ends the attempt)."""
    text = script(production, "inference.max_restarts=2")
    assert "export MAX_RESTARTS=2\n" in text
    starts = tmp_path / "starts"
    # Killed on its first two starts, then a clean exit.
    server = f'echo x >> {starts}; [ "$(wc -l < {starts})" -gt 2 ] && exit 0; kill -9 $$'

    def serve(restarts: int) -> subprocess.CompletedProcess[str]:
        starts.unlink(missing_ok=True)
        return subprocess.run(["bash", "-c", serve_loop(text), "inference", "bash", "-c", server],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={"MAX_RESTARTS": str(restarts), "PATH": "/usr/bin:/bin"})

    done = serve(2)
    assert done.returncode == 0 and starts.read_text().count("x") == 3, done.stderr
    assert "inference server exited 137; restart 2 of 2" in done.stderr
    gave_up = serve(1)
    assert gave_up.returncode == 137 and starts.read_text().count("x") == 2
