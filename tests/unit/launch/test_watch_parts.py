"""The pure parts of `opsctl watch`: which node counts as failed, what the metrics say."""

from __future__ import annotations

import json
from pathlib import Path

from opsctl.model import Node
from opsctl.watch import metrics_summary, node_failure, reward_curve, trainer_steps


def test_node_failure_reasons() -> None:
    assert node_failure(Node("gpu-001", "allocated")) == ""
    assert node_failure(Node("gpu-001", "allocated", flags={"DRAIN"})) == ""  # draining, still alive
    assert node_failure(Node("gpu-001", "allocated", flags={"NOT_RESPONDING"})) == "slurm not_responding"
    assert node_failure(Node("gpu-001", "down", reason="Not responding")) == "slurm down: Not responding"
    assert node_failure(Node("gpu-001", "idle", flags={"FAIL", "DRAIN"})) == "slurm fail"


def test_metrics_summary_reads_latest_values_and_skips_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"component": "trainer", "step": 0, "tokens_per_s": 10.0},
        {"component": "orchestrator", "step": 1, "reward_mean_arithmetic": 0.25, "off_policy_lag_max": 1},
        {"component": "trainer", "step": 1, "tokens_per_s": 12.5},
        {"component": "orchestrator", "event": "eval", "step": 1, "eval_accuracy": 0.5},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"component": "trai')
    assert metrics_summary(path) == {"step": 1, "reward": 0.25, "tokens_per_s": 12.5, "off_policy_lag": 1,
                                     "environment": {}}
    assert trainer_steps(path) == [0, 1]
    assert metrics_summary(tmp_path / "absent")["step"] is None
    vf = {"component": "orchestrator", "step": 2, "reward_mean_vf:tools": 0.5, "off_policy_lag_max": 0,
          "turns_mean_vf:tools": 2.25, "env_errors_vf:tools": 1.0, "reward_fn_errors_total_vf:tools": 0.0,
          "sampled_tokens_mean_vf:tools": 31.5, "truncated_fraction_vf:tools": 0.125}
    path.write_text(json.dumps(vf) + "\n")
    assert metrics_summary(path)["environment"] == {"turns": 2.25, "sampled_tokens": 31.5, "truncated": 0.125,
                                                    "env_errors": 1.0, "reward_fn_errors": 0.0}


def test_reward_curve_bins_training_reward_and_keeps_every_eval(tmp_path: Path) -> None:
    lines = [json.dumps({"event": "eval", "step": 0, "eval_accuracy": 0.25})]
    for step in range(1, 11):
        lines.append(json.dumps({"component": "trainer", "step": step, "loss": 1.0}))
        lines.append(json.dumps({"component": "orchestrator", "step": step,
                                 "reward_mean_arithmetic": step / 10}))
    lines.append('{"component": "orchestrator", "step": 11, "reward_mean_arith')  # being appended
    lines.append(json.dumps({"event": "eval", "step": 10, "eval_accuracy": 0.6}))
    lines.append(json.dumps({"event": "eval", "step": 5, "env": "reverse_text", "eval_accuracy": 0.1}))
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    curve, evals = reward_curve(path, points=4)
    # 10 steps in bins of ceil(10/4)=3: steps 1-3, 4-6, 7-9, 10.
    assert [step for step, _ in curve] == [3, 6, 9, 10]
    assert [round(r, 3) for _, r in curve] == [0.2, 0.5, 0.8, 1.0]
    assert evals == {"": [(0, 0.25), (10, 0.6)], "reverse_text": [(5, 0.1)]}
    assert reward_curve(tmp_path / "missing.jsonl") == ([], {})


def test_reward_curve_counts_a_step_redone_after_a_resume_once_in_step_order(tmp_path: Path) -> None:
    # Attempt 0 reached step 7, checkpointed at 4 and died; attempt 1 redid 5..7 and went on to 9.
    def rec(step: int, reward: float) -> str:
        return json.dumps({"component": "orchestrator", "step": step, "reward_mean_arithmetic": reward})

    lines = [rec(s, 0.0) for s in range(8)] + [rec(s, 1.0) for s in range(5, 10)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    curve, _ = reward_curve(path, points=2)
    assert curve == [(4, 0.0), (9, 1.0)]
