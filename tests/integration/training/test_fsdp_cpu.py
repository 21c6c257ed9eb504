"""FSDP2 on CPU over gloo, two trainer ranks, batches that do not divide evenly between them:
the run completes (every rank issues the same collectives) and matches one rank's run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rljob_helpers import ROOT
from safetensors.torch import load_file

from training.rundir import free_port

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("fsdp_worker.py")


def run_ranks(model_dir: Path, out: Path, world: int, fsdp: str) -> dict[str, list[float]]:
    out.mkdir()
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(model_dir), str(out), fsdp],
            cwd=ROOT,
            env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": port, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(world)
    ]
    try:
        for p in procs:
            # A rank with fewer micro-batches than its peer would leave the peer's reduce-scatter
            # waiting forever: a hang here is the bug.
            assert p.wait(timeout=240) == 0, p.stdout.read().decode() if p.stdout else ""
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return dict(json.loads((out / "result.json").read_text()))


def test_two_fsdp_ranks_with_uneven_batches_match_one_rank(tmp_path: Path, tiny_model_dir: Path) -> None:
    one = run_ranks(tiny_model_dir, tmp_path / "one", 1, "off")
    two = run_ranks(tiny_model_dir, tmp_path / "two", 2, "on")
    assert one["micro_batches"] == [3, 3, 3] and two["micro_batches"] == [2, 2, 2]
    # Same loss and weights up to float32 reduction order (the sums run in another order and
    # FSDP averages then rescales): 1e-5 relative on the loss, 1e-4 absolute on the weights.
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5, abs=1e-7)
    w1 = load_file(str(tmp_path / "one" / "model.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "model.safetensors"))
    assert w1.keys() == w2.keys()
    worst = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert worst < 1e-4, worst
    assert any(not torch.equal(w1[k], load_file(str(tiny_model_dir / "model.safetensors"))[k]) for k in w1)
