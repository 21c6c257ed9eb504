"""`opsctl runs view` in headless Chromium on a run directory written as a run with a node failure
leaves it, damaged on purpose: curves, the attempt timeline, the rollout table's filters and
paging, the gaps named; served, it shows a live run's progress on reload."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser import CHROMIUM, open_page

from opsctl.launch.ledger import Attempt, Ledger, Remediation
from training.config import dump_toml, load_config

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make test installs it)")]

ROOT = Path(__file__).resolve().parents[3]
T0 = 1_796_000_000.0


def write_run(root: Path) -> Path:
    """6 steps on arithmetic, evals of two environments, two attempts (gpu-002 failed in the first,
    the second resumed at step 3), 60 sampled rollouts; a torn last metrics line and a checkpoint
    the ledger records but the disk lacks."""
    run = root / "r-viewer"
    run.mkdir(parents=True)
    config = load_config(None, ["trainer.steps=6", "run_id=r-viewer"])
    run.joinpath("config.toml").write_text(dump_toml(config))
    lines = []
    for step in range(6):
        lines.append({"component": "trainer", "step": step, "time": T0 + 10 * step, "loss": 1.0})
        lines.append({"component": "orchestrator", "step": step, "time": T0 + 10 * step,
                      "reward_mean_arithmetic": step / 10})
    for env, steps in (("arithmetic", (0, 3, 6)), ("reverse_text", (0, 6))):
        for step in steps:
            lines.append({"component": "orchestrator", "event": "eval", "env": env, "step": step,
                          "time": T0 + 10 * step, "eval_accuracy": 0.1 + step / 20, "policy_version": step})
    run.joinpath("metrics.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines) + '{"component": "trainer", "st')
    rollouts = [{"step": i // 10, "env": "arithmetic" if i % 2 else "reverse_text", "task_id": f"t{i}",
                 "prompt": f"{i}+1=", "completion": str(i + 1), "reward": float(i % 3 == 0),
                 "parts": {"exact_answer": float(i % 3 == 0)}, "policy_version": i // 10, "off_policy_lag": 1,
                 "time": T0 + i} for i in range(60)]
    run.joinpath("rollouts.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rollouts))
    Ledger(
        run_id="r-viewer", run_dir=str(run), job_ids=[11, 12], nodes_requested=3, inference_nodes=1,
        attempts=[
            Attempt(0, 11, ["gpu-001", "gpu-002", "gpu-003"], 0, T0, T0 + 35, "REQUEUED", 137, ["gpu-002"]),
            Attempt(1, 12, ["gpu-001", "gpu-003", "gpu-004"], 3, T0 + 40, T0 + 70, "COMPLETED", 0),
        ],
        checkpoints=[3],
        remediations=[Remediation(T0 + 36, "gpu-002", "slurm not_responding", "drained", "applied"),
                      Remediation(T0 + 36, "gpu-002", "slurm not_responding", "quarantined", "q.json")],
        submitted_at=T0 - 5, final_state="COMPLETED", last_step=5,
    ).save()
    return run


def view(out: Path, *runs: Path) -> str:
    argv = [sys.executable, "-m", "opsctl", "runs", "view", *map(str, runs), "--output", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return (out / "index.html").as_uri()


def rows(page) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return page.find("tr", "rollout")


def test_curves_timeline_gaps_and_the_rollout_filters(tmp_path: Path) -> None:
    url = view(tmp_path / "site", write_run(tmp_path / "runs"))
    page = open_page(url, tmp_path / "browser", screenshot="viewer.png")
    assert [a["data-run"] for a in page.find("section", "run")] == ["r-viewer"]
    assert [p["data-env"] for p in page.find("path", "series") if "stroke-width" in p] == \
        ["arithmetic", "arithmetic", "reverse_text"]  # the reward curve, then one eval curve per env
    assert len(page.find("circle", "eval")) == 5
    attempts = page.find("rect", "attempt")
    assert [(a["data-attempt"], a["data-state"], a["data-resume-step"]) for a in attempts] == [
        ("0", "REQUEUED", "0"), ("1", "COMPLETED", "3")]
    assert {(f["data-node"], f["data-action"]) for f in page.find("line", "failure")} == {
        ("gpu-002", "drained"), ("gpu-002", "quarantined")}
    gaps = page.text("gaps")
    assert "1 unreadable line(s) in metrics.jsonl" in gaps
    assert "checkpoint step 3 is recorded in the ledger but missing on disk" in gaps
    assert len(rows(page)) == 25 and "page 1 of 3, 60 of 60 rollouts" in page.text("page")

    by_env = open_page(url + "?env=reverse_text&page=2", tmp_path / "browser")
    assert {r["data-env"] for r in rows(by_env)} == {"reverse_text"} and len(rows(by_env)) == 5
    assert "page 2 of 2, 30 of 60 rollouts" in by_env.text("page")
    assert [p["data-env"] for p in by_env.find("circle", "eval")] == ["reverse_text"] * 2
    rewarded = open_page(url + "?rmin=1", tmp_path / "browser")
    assert len(rows(rewarded)) == 20 and all(float(r["data-reward"]) >= 1 for r in rows(rewarded))
    none = open_page(url + "?env=arithmetic&rmin=2", tmp_path / "browser")
    assert not rows(none) and "no rollout matches the filters" in none.text("empty")
    by_time = open_page(url + "?x=time", tmp_path / "browser")
    assert len(by_time.find("path", "series")) == 3
    assert "minutes since the first step" in by_time.text("charts")


def test_two_runs_side_by_side(tmp_path: Path) -> None:
    first = write_run(tmp_path / "a")
    second = write_run(tmp_path / "b")
    (second / "rollouts.jsonl").unlink()  # older runs recorded none
    page = open_page(view(tmp_path / "site", first, second), tmp_path / "browser")
    assert [s["data-run"] for s in page.find("section", "run")] == ["r-viewer", "r-viewer"]
    assert len(rows(page)) == 25 and "no rollouts recorded" in page.text("empty")


def test_served_it_shows_a_live_runs_progress_on_reload(tmp_path: Path) -> None:
    run = write_run(tmp_path / "runs")
    server = subprocess.Popen([sys.executable, "-m", "opsctl", "runs", "view", str(run), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + server.stderr.read()
        url = line.split()[1]
        before = open_page(url, tmp_path / "browser")
        assert "step 6 of 6" in before.text("summary")
        with run.joinpath("metrics.jsonl").open("a") as fh:  # the run goes on (after the torn line)
            fh.write("\n" + json.dumps({"component": "trainer", "step": 6, "time": time.time()}) + "\n")
        assert "step 7 of 6" in open_page(url, tmp_path / "browser").text("summary")
    finally:
        server.terminate()
        server.wait(timeout=30)
