"""The demo job learns: SFT leaves the arithmetic task mid-range, RL with the verifiable reward
raises held-out accuracy (pass@1 at the sampling temperature, 4 samples on each of 200 held-out
problems) well beyond it. The margin is set by bench/bench_learning.py (docs/benchmarks.md,
"Learning"): over 6 job seeds, quiet and beside a CPU-bound process, the smallest gain it measured
must stay well above MARGIN, so that seeds, async timing and load cannot fail this test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from browser import CHROMIUM, open_page
from rljob_helpers import DEMO, launch_argv, metrics

from training.config import load_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARGIN = 0.25


def test_sft_then_rl_raises_held_out_accuracy(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    job = jobs(launch_argv(out, []), tmp_path / "launch.log")
    assert job.wait(timeout=900) == 0, (tmp_path / "launch.log").read_text()[-3000:]
    steps = load_config(DEMO).trainer.steps
    evals = {r["step"]: r for r in metrics(out) if r.get("event") == "eval"}
    before, after = evals[0]["eval_accuracy"], evals[steps]["eval_accuracy"]
    assert evals[0]["policy_version"] == 0 and evals[steps]["policy_version"] == steps
    print(f"held-out accuracy: {before:.3f} after SFT, {after:.3f} after RL ({after - before:+.3f})")
    # SFT leaves real headroom ...
    assert 0.05 < before < 0.5
    # ... and RL closes a good part of it.
    assert after - before >= MARGIN, f"held-out accuracy {before:.3f} -> {after:.3f}"

    # The run viewer on the finished demo run: reward curve, every evaluation (5: before RL, every
    # 250 steps, at the end), the sampled rollouts.
    if CHROMIUM is None:
        pytest.skip("chromium not installed (make test installs it): the viewer part was not checked")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "opsctl", "runs", "view", str(out), "--output", str(site)],
                   check=True, timeout=120)
    page = open_page((site / "index.html").as_uri(), tmp_path / "browser", screenshot="demo-run.png")
    assert [p["data-env"] for p in page.find("path", "series")] == ["arithmetic", "arithmetic"]
    assert len(page.find("circle", "eval")) == len(evals) >= 3
    assert len(page.find("tr", "rollout")) == 25 and not page.text("gaps")
