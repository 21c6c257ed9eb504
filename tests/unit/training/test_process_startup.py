"""What each job process does at start-up. Every process of every attempt imports, and
transformers' model classes bring torch's compiler and distributed tensor modules (a second and a
half of CPU): the orchestrator tokenizes and builds no model, so it must not load them. And each
process runs torch on its configured threads: torch's default of one per core spins against the
job's other processes on a shared node (chat SFT once ran on two: its CPU time doubled when the
machine was busy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from imports import modules_after

CODE_DEMO = Path(__file__).resolve().parents[3] / "training" / "configs" / "code-demo.toml"
MODEL_CODE = ["training.model", "training.varlen", "transformers.modeling_utils"]


def test_the_orchestrator_loads_no_model_code(tiny_model_dir: Path) -> None:
    loaded = modules_after(
        "import training.orchestrator.__main__\n"
        "from training.tokenizer import load_tokenizer\n"
        f"load_tokenizer({str(tiny_model_dir)!r})('12+3=')"
    )
    assert "training.orchestrator.batch" in loaded  # the probe imported what it names
    assert not [m for m in MODEL_CODE if m in loaded]


def test_the_trainer_does() -> None:
    # the check above can fail: the same probe sees the model code where it is used
    loaded = modules_after("import training.trainer.__main__")
    assert [m for m in MODEL_CODE if m in loaded] == MODEL_CODE


def test_chat_sft_runs_on_the_configured_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import training.sft
    import training.trainer.sft as chat

    seen: list[int] = []
    monkeypatch.setattr(chat, "main", lambda run, cfg: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        training.sft.main(["--run-dir", str(tmp_path / "run"), "--config", str(CODE_DEMO),
                           "-o", "trainer.threads=1"])
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
