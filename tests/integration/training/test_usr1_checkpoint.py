"""SIGUSR1 (what Slurm sends before a time limit) makes the trainer checkpoint at the next step and
stop, the orchestrator checkpoints the same step from its snapshots, and the next attempt resumes
there rather than at the last periodic checkpoint, with no task trained on twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rljob_helpers import DEMO, FAST, ROOT, launch_argv, metrics

from training.config import dump_toml, load_config
from training.fsutil import is_committed
from training.sft import EXIT_STOPPED

pytestmark = pytest.mark.integration

STEPS = 30


def test_usr1_checkpoints_trainer_and_orchestrator_at_the_same_step(tmp_path: Path, jobs) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    overrides = [
        *FAST,
        f"trainer.steps={STEPS}",
        "trainer.checkpoint_every=1000",
        "orchestrator.async_level=1",
    ]
    job = jobs(launch_argv(out, overrides), tmp_path / "first.log")
    deadline = time.monotonic() + 600
    while not any(r["component"] == "trainer" and r["step"] >= 5 for r in _metrics(out)):
        assert job.proc.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()
        time.sleep(0.05)
    pid = json.loads((out / "peers" / "metrics-trainer.json").read_text())["pid"]
    os.kill(pid, signal.SIGUSR1)
    ckpts = out / "checkpoints"
    while not (
        list(ckpts.glob("orchestrator/step_*/COMMITTED")) and list(ckpts.glob("trainer/step_*/COMMITTED"))
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.kill()
    (step_dir,) = [p.parent for p in ckpts.glob("trainer/step_*/COMMITTED")]
    step = int(step_dir.name[5:])
    assert 5 < step < STEPS
    assert (ckpts / "orchestrator" / f"step_{step}" / "COMMITTED").is_file()

    assert jobs(launch_argv(out, [], resume=True), tmp_path / "resume.log").wait(600) == 0
    trainer_steps = [r["step"] for r in metrics(out) if r["component"] == "trainer"]
    # The second attempt starts exactly at the SIGUSR1 checkpoint.
    first_resumed = trainer_steps.index(step)
    assert trainer_steps[first_resumed:] == list(range(step, STEPS))
    groups = [
        g
        for s in range(STEPS)
        for g in json.loads((out / "rollouts" / f"step_{s}" / "STABLE").read_text())["groups"]
    ]
    assert len(groups) == len(set(groups)) == STEPS * 4


def _metrics(out: Path) -> list[dict]:  # type: ignore[type-arg]
    return metrics(out) if (out / "metrics.jsonl").exists() else []


def test_usr1_during_sft_stops_it_cleanly_and_a_rerun_redoes_it(tmp_path: Path) -> None:
    """Slurm's warning can come while SFT runs: SFT stops at the next step with EXIT_STOPPED and
    publishes nothing, so the requeued attempt runs SFT again from a clean directory."""
    out = tmp_path / "run"
    out.mkdir()
    cfg = load_config(DEMO, [*FAST, "sft.steps=100000"])
    (out / "config.toml").write_text(dump_toml(cfg))
    argv = [sys.executable, "-m", "training.sft", "--run-dir", str(out)]
    log = tmp_path / "sft.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while not any(r.get("stage") == "sft" for r in _metrics(out)):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=60) == EXIT_STOPPED, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "SIGUSR1: stopped before SFT step" in log.read_text()
    assert not (out / "sft" / "final").exists()
    assert not (out / "sft").exists() or list((out / "sft").iterdir()) == []
    # The next attempt (here with fewer steps, to be quick) publishes SFT where the first stopped.
    rerun = subprocess.run([*argv, "-o", "sft.steps=3"], capture_output=True, text=True, cwd=ROOT,
                           timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert is_committed(out / "sft" / "final")
