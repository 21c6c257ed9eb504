"""A reasoning-gym environment (reasoning-gym from PyPI, through verifiers' ReasoningGymEnv, as the
package environments/vf_reasoning_gym) trains for a few steps through the whole job with the
network cut off: `opsctl launch rl-run --local` runs inside a new network namespace
(`unshare -n`) whose only interface is loopback, so the launch's install and check, the
environment's data and every process of the job must do without one."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from rljob_helpers import ROOT, Job, launch_argv, metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("verifiers")  # the training extra
pytest.importorskip("reasoning_gym")  # the environment's dependency (the dev extra)
PACKAGE = ROOT / "environments" / "vf_reasoning_gym"
ENV = "vf:vf-reasoning-gym"


def test_a_reasoning_gym_environment_trains_with_the_network_cut_off(
    jobs: Callable[[list[str], Path], Job], tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a network namespace needs root and unshare (util-linux)")
    run, links = tmp_path / "run", tmp_path / "links.txt"
    overrides = [
        f'env.name="{ENV}"', "env.kwargs={config = {min_terms = 2, max_terms = 2}, num_train = 64}",
        f'env.packages=["{PACKAGE}"]', 'model.vocab="text"', "sft.enabled=false", "eval.size=4",
        "trainer.steps=3", "orchestrator.batch_groups=2", "orchestrator.group_size=4",
        "inference.max_tokens=16", "orchestrator.mask_truncated=false",
    ]
    job = " ".join(shlex.quote(a) for a in launch_argv(run, overrides))
    # lo comes up (the job's processes talk over it); nothing else exists in the namespace.
    script = f"ip link set lo up && ip -o link show > {shlex.quote(str(links))} && exec {job}"
    handle = jobs(["unshare", "--net", "sh", "-c", script], tmp_path / "job.log")
    assert handle.wait(900) == 0, (tmp_path / "job.log").read_text()[-3000:]

    assert [line.split(":")[1].strip() for line in links.read_text().splitlines()] == ["lo"]
    assert (run / "environments" / "vf_reasoning_gym.py").is_file()
    records = metrics(run)
    steps = [r for r in records if r.get("component") == "orchestrator" and "event" not in r]
    assert [r["step"] for r in steps] == [0, 1, 2]
    assert all(f"reward_mean_{ENV}" in r and r["completion_tokens"] > 0 for r in steps), steps
    trainer = [r["step"] for r in records if r.get("component") == "trainer" and "loss" in r]
    assert trainer == [0, 1, 2]
    evals = [r for r in records if r.get("event") == "eval"]
    assert [e["step"] for e in evals] == [0, 3] and all(e["env"] == ENV for e in evals)
