"""SFT's accuracy target: it stops at the first check whose sampled training accuracy reaches the
target, records where it stopped, and runs to `steps` when the target is never reached."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from training.config import ConfigError, load_config
from training.envs import load_environment
from training.model import load_model
from training.rundir import RunDir
from training.sft import run_sft, sampled_accuracy
from training.tokenizer import load_tokenizer

DEMO = Path(__file__).resolve().parents[3] / "training" / "configs" / "demo.toml"
# 1-digit addition learns in a few hundred steps of the demo's tiny model: quick, yet a real run.
SMALL = ["env.kwargs={digits = 1, num_train = 60, num_eval = 10}", "sft.num_demos=60", "sft.check_size=40"]


def checks(run: RunDir) -> list[dict]:  # type: ignore[type-arg]
    rows = [json.loads(line) for line in (run.root / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "train_accuracy" in r]


def test_sft_stops_at_the_first_check_that_reaches_the_target(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = load_config(DEMO, [*SMALL, "sft.steps=1500", "sft.target_accuracy=0.5", "sft.check_every=20"])
    run = RunDir(tmp_path / "run")
    final = run_sft(run, cfg)
    seen = checks(run)
    assert seen and seen[-1]["train_accuracy"] >= 0.5
    assert all(r["train_accuracy"] < 0.5 for r in seen[:-1])
    info = json.loads((final / "STABLE").read_text())
    assert info["steps"] == seen[-1]["step"] + 1 < 1500
    assert info["train_accuracy"] == seen[-1]["train_accuracy"]
    # The published model scores what the check said, on the same problems and draw.
    env = load_environment(cfg.env.name, **cfg.env.kwargs)
    pool = list(env.dataset)
    tasks = random.Random(cfg.seed + 1).sample(pool, min(cfg.sft.check_size, len(pool)))
    acc = sampled_accuracy(
        load_model(final), load_tokenizer(final), env, tasks, cfg.inference.temperature,
        cfg.inference.max_tokens, cfg.seed + seen[-1]["step"],
    )
    assert acc == pytest.approx(seen[-1]["train_accuracy"], abs=1e-4)


def test_without_a_reachable_target_sft_runs_every_step(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = load_config(DEMO, [*SMALL, "sft.steps=40", "sft.target_accuracy=1.0", "sft.check_every=20"])
    run = RunDir(tmp_path / "run")
    final = run_sft(run, cfg)
    info = json.loads((final / "STABLE").read_text())
    assert info["steps"] == 40 and "train_accuracy" not in info
    assert [r["step"] for r in checks(run)] == [19, 39]


@pytest.mark.parametrize(
    "override", ["sft.target_accuracy=1.5", "sft.target_accuracy=-0.1", "sft.check_every=0"]
)
def test_bad_target_settings_are_refused(override: str) -> None:
    with pytest.raises(ConfigError, match="sft"):
        load_config(DEMO, [override])
