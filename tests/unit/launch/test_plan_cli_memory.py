"""`opsctl launch rl-run --plan` (opsctl/launch/plan.py) through the real entry point, without torch:
the GLM-4.5-Air layout on 64 x 8 H200 fits and says what it does not model, a layout that cannot
fit is refused with one line and exit 2, and the parameter count follows the config."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from launch_unit_helpers import partition

from opsctl.cli import main
from opsctl.errors import ConfigError
from opsctl.launch.plan import ModelShape
from opsctl.launch.settings import LaunchSection
from opsctl.launch.slurm import plan_layout
from training.config import load_config

REPO = Path(__file__).resolve().parents[3]
AIR = REPO / "training" / "configs" / "models" / "glm-4.5-air"
AIR_RUN = ["-o", f"model.path={AIR}", "-o", "model.dtype=bfloat16", "-o", "sft.enabled=false",
           "-o", "orchestrator.micro_batch_tokens=16384", "-o", "orchestrator.pack_row_tokens=16384",
           "-o", "inference.max_tokens=16384"]


def opsctl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


@pytest.fixture(autouse=True)
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "opsctl.toml").write_text("[launch]\nnodes = 64\ninference_nodes = 16\n")
    monkeypatch.setenv("OPSCTL_CONFIG", str(tmp_path / "opsctl.toml"))


def test_glm_4_5_air_on_64_h200_nodes_fits_and_names_what_is_not_modelled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = opsctl(capsys, "launch", "rl-run", "--plan", "--json", *AIR_RUN)
    assert code == 0
    plan = json.loads(out)
    assert plan["fits"] and plan["layout"]["trainer_gpus"] == 384 and plan["layout"]["checkpointing"]
    assert 105e9 < plan["parameters"] < 110e9 and 11e9 < plan["active_parameters"] < 15e9
    assert plan["memory"]["parameters"] == plan["parameters"] * 4 // 384  # float32 master shards
    assert plan["layout"]["compute_bytes"] == 2 and plan["publish_bytes"] == plan["parameters"] * 2
    assert any("expert parallelism" in n for n in plan["not_modelled"])
    code, text, _ = opsctl(capsys, "launch", "rl-run", "--plan", *AIR_RUN)
    assert code == 0 and "layout: 64 nodes (16 inference, 48 trainer): fits" in text
    assert "not modelled: expert parallelism" in text and "peak" in text


def test_a_layout_that_cannot_fit_is_refused_with_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # two trainer nodes cannot hold 107B parameters' float32 state (16 bytes each over 16 GPUs)
    code, out, err = opsctl(capsys, "launch", "rl-run", "--plan", "--nodes", "3", "--inference-nodes", "1",
                            *AIR_RUN)
    assert code == 2
    assert "does NOT fit" in out
    assert err.strip().splitlines()[-1].endswith("the layout does not fit the GPU (see the plan above)")
    assert "Traceback" not in err


def test_hsdp_over_a_node_does_not_fit_and_over_eight_nodes_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan_args = ("launch", "rl-run", "--plan", *AIR_RUN, "-o")
    code, out, _ = opsctl(capsys, *plan_args, "trainer.shard_gpus=64", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["fits"] and plan["layout"]["shard_gpus"] == 64
    assert plan["memory"]["parameters"] == plan["parameters"] * 4 // 64
    code, out, err = opsctl(capsys, *plan_args, "trainer.shard_gpus=8")
    assert code == 2 and "trainer.shard_gpus" in out and "does not fit the GPU" in err
    code, _, err = opsctl(capsys, *plan_args, "trainer.shard_gpus=5")
    assert code == 2
    assert err.strip() == "opsctl: error: trainer.shard_gpus 5 does not divide the 384 trainer GPUs"


def test_the_count_follows_the_config() -> None:
    cfg = json.loads((AIR / "config.json").read_text())
    air = ModelShape.from_hf(cfg)
    assert air.dense_layers == 1 and air.experts == 128 and air.attention_bias and not air.qk_norm
    one_expert = 3 * 4096 * 1408
    more = ModelShape.from_hf({**cfg, "n_routed_experts": 129})
    assert more.total - air.total == 45 * (one_expert + 4096 + 1)  # 45 MoE layers: expert, router row, bias
    with pytest.raises(ValueError, match="cannot size the model"):
        ModelShape.from_hf({"model_type": "glm4_moe"})


def test_the_plan_does_not_import_torch() -> None:
    import subprocess

    code = ("import sys, opsctl.launch.plan as p; p.ModelShape.from_hf({'model_type': 'llama', "
            "'vocab_size': 10, 'hidden_size': 8, 'num_hidden_layers': 1, 'num_attention_heads': 2, "
            "'intermediate_size': 16}); assert 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_launch_gate_refuses_what_the_planner_refuses(production: LaunchSection) -> None:
    """Not only --plan: `opsctl launch rl-run` itself refuses the layout before rendering or sbatch."""
    cfg = load_config(None, [a for a in AIR_RUN if a != "-o"])
    with pytest.raises(ConfigError, match=r"^the layout does not fit the GPU: \d+\.\d GiB per trainer GPU, "
                                          r"126\.4 GiB usable; see opsctl launch rl-run --plan$"):
        plan_layout(production, cfg, partition(3), set(), {}, run_id="r1", run_dir=Path("/shared/runs/r1"),
                    nodes=3, inference_nodes=1)
    cfg = load_config(None, [a for a in AIR_RUN if a != "-o"])
    text = plan_layout(production, cfg, partition(64), set(), {}, run_id="r1",
                       run_dir=Path("/shared/runs/r1")).script
    assert "training.trainer" in text  # 48 trainer nodes: it fits and renders
