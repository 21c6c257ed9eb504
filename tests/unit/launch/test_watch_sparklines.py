"""`opsctl watch` shows the run's reward and throughput as sparklines, from the metrics.jsonl the
training job's own writer produces."""

from __future__ import annotations

import io
import math
from pathlib import Path

from rich.console import Console

from opsctl.cli.watch import _table
from opsctl.watch import SPARK_BARS, SPARK_POINTS, Snapshot, metric_history, sparkline, sparklines
from training.metrics import Metrics
from training.rundir import RunDir


def test_sparkline_scales_between_the_series_own_extremes() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == SPARK_BARS[0] + SPARK_BARS[4] + SPARK_BARS[-1]
    assert sparkline([10.0, 30.0, 20.0]) == "▁█▅"
    assert sparkline([3.0, 3.0]) == SPARK_BARS[3] * 2  # flat: middle bars, not a cliff
    assert sparkline([1.0, math.nan, 2.0]) == "▁ █" and sparkline([]) == "" and sparkline([math.inf]) == " "


def test_history_and_live_view_from_the_jobs_metrics(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    orch, trainer = Metrics(run, "orchestrator", port=None), Metrics(run, "trainer", port=None)
    try:
        for step in range(SPARK_POINTS + 5):
            orch.log({"step": step, "reward_mean_arithmetic": step / 100, "off_policy_lag_max": 1})
            trainer.log({"step": step, "tokens_per_s": 1000.0 + (step % 2) * 500, "loss": 0.1})
        orch.log({"event": "eval", "step": 0, "eval_accuracy": 0.5})  # not a training step
    finally:
        orch.close()
        trainer.close()
    rewards, tokens = metric_history(run.metrics)
    assert len(rewards) == len(tokens) == SPARK_POINTS  # the last steps only, oldest first
    assert rewards[0] == 5 / 100 and rewards[-1] == (SPARK_POINTS + 4) / 100
    assert set(tokens) == {1000.0, 1500.0}
    snap = Snapshot(time=0.0, run_id="r1", job_id=7, job_state="RUNNING", attempt=1, attempts=[], step=44,
                    reward=rewards[-1], tokens_per_s=tokens[-1], off_policy_lag=1, last_checkpoint=None,
                    nodes=[], reward_history=rewards, tokens_history=tokens)  # fmt: skip
    line = sparklines(snap)
    assert line.startswith(f"reward {sparkline(rewards)} 0.440  tokens/s ")
    assert line.endswith(f"{sparkline(tokens)} 1000") and sparkline(rewards).endswith("█")
    out = io.StringIO()
    Console(file=out, width=200).print(_table(snap))
    assert line in out.getvalue() and "turns" not in out.getvalue()
    snap.environment = {"turns": 2.25, "env_errors": 1.0, "reward_fn_errors": 0.0}
    out = io.StringIO()
    Console(file=out, width=220).print(_table(snap))
    assert "checkpoint -  turns 2.25  env errors 1  reward fn errors 0" in out.getvalue()
    assert metric_history(tmp_path / "absent") == ([], [])
    assert sparklines(Snapshot(0.0, "r", 1, "PENDING", 1, [], None, None, None, None, None, [])) == ""
