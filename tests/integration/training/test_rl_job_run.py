"""A real job: SFT, inference server, two gloo trainer ranks and the orchestrator, as processes, on
the tiny GLM-4.5-Air-architecture MoE (training/configs/moe-demo.toml): chat SFT on the dataset
shipped with the tests as two FSDP2 ranks, then RL whose trainer ranks shard the model too and
publish its weights, each rank its own shard, in the release's per-expert names to the inference
server every step. The other whole-job tests run the dense demo model."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from rljob_helpers import FAST, MOE_DEMO, ROOT, launch_argv, metrics

pytestmark = pytest.mark.integration
CHAT = ROOT / "tests" / "fixtures" / "chat" / "arith-chat.jsonl"


def test_async_bounds_hold_in_a_real_run(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    steps, k, max_off = 10, 2, 1
    job = jobs(
        launch_argv(
            out,
            [
                *FAST,
                f"trainer.steps={steps}",
                f"orchestrator.async_level={k}",
                f"orchestrator.max_off_policy_steps={max_off}",
                "orchestrator.scheduling=continuous",  # "auto" is batch on the built-in engine
                "trainer.world_size=2",
                "trainer.fsdp=on",
                f'sft.dataset="{CHAT}"',
                "sft.steps=4",
                "sft.checkpoint_every=2",
                "trainer.checkpoint_every=5",
                "eval.size=8",
                "eval.samples=2",
                "eval.pass_k=[1, 2]",
                "eval.every=4",
                'eval.envs=["arithmetic", "reverse_text"]',
            ],
            job=MOE_DEMO,
        ),
        tmp_path / "launch.log",
    )
    assert job.wait(timeout=600) == 0, (tmp_path / "launch.log").read_text()

    recs = metrics(out)
    orch = [r for r in recs if r["component"] == "orchestrator" and "event" not in r]
    trainer = [r for r in recs if r["component"] == "trainer"]
    assert [r["step"] for r in orch] == list(range(steps))
    assert [r["step"] for r in trainer] == list(range(steps))
    assert [r["step"] for r in recs if r["component"] == "sft"] == [0, 1, 2, 3]
    for r in orch:
        # Inference started each group at most async_level policy versions behind its batch ...
        assert r["async_gap_max"] <= k
        # ... and no group older than max_off_policy_steps reached the trainer.
        assert r["off_policy_lag_max"] <= max_off
        assert set(map(int, r["off_policy_lag_hist"])) <= set(range(max_off + 1))
        assert r["rollouts"] == 4 * 4
        assert 0 <= r["truncated_completions"] <= r["rollouts"]
    # With k=2 but max_off_policy_steps=1, continuous scheduling never requests a group two batches
    # ahead of its policy (it could only be dropped); groups that fall behind in flight are
    # cancelled, not finished. Drops and cancellations are counted consistently. (The batch
    # schedule's drop-and-requeue is covered in tests/unit/training/test_rollout_scheduler.py.)
    print(
        "dropped per step:",
        [r["dropped_groups"] for r in orch],
        "cancelled per step:",
        [r["cancelled_groups"] for r in orch],
        "lag max:",
        [r["off_policy_lag_max"] for r in orch],
    )
    assert all(r["scheduling"] == "continuous" for r in orch)
    assert orch[-1]["dropped_groups_total"] == sum(r["dropped_groups"] for r in orch)
    assert orch[-1]["cancelled_groups_total"] == sum(r["cancelled_groups"] for r in orch)
    assert any(r["off_policy_lag_max"] == 1 for r in orch)  # it did run off-policy
    assert all(r["loss_tokens"] > 0 and r["grad_norm"] >= 0 and "mismatch_kl" in r for r in trainer)
    # 16 short rollouts pack into one micro-batch; the second rank runs a filler (pure padding).
    assert all(r["micro_batches"] == 1 and 0 < r["padding_fraction"] < 0.5 for r in trainer)
    # [eval]: both environments before step 0, every 4 steps beside the rollouts (one may be skipped
    # while the one before still runs), and on the final policy.
    evals = [r for r in recs if r.get("event") == "eval"]
    for env in ("arithmetic", "reverse_text"):
        mine = [e for e in evals if e["env"] == env]
        assert mine[0]["step"] == 0 and mine[0]["policy_version"] == mine[0]["policy_version_max"] == 0
        assert mine[-1]["step"] == steps and mine[-1]["policy_version"] == steps
        assert {e["step"] for e in mine[1:-1]} & {4, 8}, mine
        for e in mine:
            assert e["eval_size"] == 8 and e["eval_samples"] == 2
            assert 0 <= e["eval_accuracy"] == e["eval_pass_at_1"] <= e["eval_pass_at_2"] <= 1
            assert e["policy_version"] <= e["policy_version_max"] <= steps

    # The run directory holds the resolved config, per-process logs, checkpoints and weights.
    cfg = tomllib.loads((out / "config.toml").read_text())
    assert cfg["orchestrator"]["async_level"] == k and cfg["trainer"]["world_size"] == 2
    logs = {p.name for p in (out / "logs").iterdir()}
    assert logs == {"sft-0.log", "sft-1.log", "inference-0.log", "trainer-0.log", "trainer-1.log",
                    "orchestrator.log"}
    assert json.loads((out / "sft" / "final" / "STABLE").read_text())["steps"] == 4
    assert (out / "weights" / f"step_{steps}" / "STABLE").is_file()
    # Versions on disk: the newest max(keep_weights, async_level + 2) and those of the two kept
    # checkpoints (5, 10), each a model directory in the release's names (a shard per trainer rank).
    kept = sorted(int(p.name.removeprefix("step_")) for p in (out / "weights").glob("step_*"))
    newest = max(3, k + 2)
    assert kept == sorted({5, 10} | set(range(steps - newest + 1, steps + 1))), kept
    index = json.loads((out / "weights" / "step_10" / "model.safetensors.index.json").read_text())
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in index["weight_map"]
    assert len(set(index["weight_map"].values())) == 2
    assert (out / "checkpoints" / "trainer" / "step_5" / "COMMITTED").is_file()
    assert (out / "checkpoints" / "orchestrator" / "step_5" / "COMMITTED").is_file()
    assert (out / "peers" / "metrics-trainer.json").is_file()


def test_a_failing_component_fails_the_job(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    # model.path points at a directory with no checkpoint: SFT fails, the launcher reports it and
    # starts nothing else.
    out = tmp_path / "run"
    job = jobs(launch_argv(out, [*FAST, f"model.path={tmp_path / 'nothing'}"]), tmp_path / "launch.log")
    assert job.wait(timeout=300) == 1
    assert "sft exited with 1" in (tmp_path / "launch.log").read_text()
    assert not (out / "logs" / "orchestrator.log").exists()
