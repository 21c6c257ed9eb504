"""What `opsctl runs view` reads from a run directory (opsctl/launch/viewer.py), without a browser."""

from __future__ import annotations

import json
from pathlib import Path

from opsctl.launch.viewer import data_script, latest_attempt, view_data
from training.config import dump_toml, load_config


def test_a_resumed_attempt_replaces_the_rollouts_of_the_steps_it_redid() -> None:
    # attempt 0 reached step 7 and died; attempt 1 resumed from step 5
    steps = [0, 1, 2, 3, 4, 5, 6, 7, 5, 6, 7, 8]
    rollouts = [{"step": s, "attempt": 0 if i < 8 else 1} for i, s in enumerate(steps)]
    kept = latest_attempt(rollouts)
    want = [(s, 0) for s in range(5)] + [(s, 1) for s in range(5, 9)]
    assert [(r["step"], r["attempt"]) for r in kept] == want


def test_a_run_with_nothing_yet_and_one_with_damage_both_render_data(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.toml").write_text(dump_toml(load_config(None, ["trainer.steps=4"])))
    view = view_data(fresh)
    assert (view.rewards, view.evals, view.rollouts, view.attempts) == ({}, {}, [], [])
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.toml").write_text(dump_toml(load_config(None, ["trainer.steps=4"])))
    lines = [{"component": "trainer", "step": s} for s in (0, 1, 3)]
    (damaged / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "{torn")
    (damaged / "rollouts.jsonl").write_text('{"step": 0, "env": "a", "reward": 1.0}\nnot json\n')
    view = view_data(damaged)
    assert view.gaps == ["1 unreadable line(s) in metrics.jsonl (torn or truncated): not shown",
                         "trainer steps missing from metrics.jsonl: 2",
                         "1 unreadable line(s) in rollouts.jsonl (torn or truncated): not shown"]
    assert len(view.rollouts) == 1
    script = data_script([damaged])
    assert script.startswith("window.OPSCTL_RUNS = [") and "</" not in script
