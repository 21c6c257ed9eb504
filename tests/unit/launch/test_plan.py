"""Node choice and refusals of `opsctl launch rl-run` (pure planning, nothing submitted)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from launch_unit_helpers import DEMO, partition

from opsctl.errors import ConfigError, Refused, UsageError
from opsctl.launch.settings import LaunchSection
from opsctl.launch.slurm import LaunchRequest, plan_layout, resolve_job_config

RUN = Path("/shared/runs/r1")


def job() -> object:
    return resolve_job_config(LaunchRequest(config=str(DEMO)))


def test_production_defaults_are_64_nodes_16_inference(production: LaunchSection) -> None:
    plan = plan_layout(production, job(), partition(64), set(), {}, run_id="r1", run_dir=RUN)
    assert (plan.nodes, plan.inference_nodes) == (64, 16)
    assert plan.job_config.trainer.world_size == 48 * 8
    assert "#SBATCH --nodes=64\n" in plan.script
    assert "INFERENCE_NODES=16\n" in plan.script
    # The trainer's share follows the allocation (fewer nodes after a shrinking resubmission).
    assert "TRAINER_NODES=$((SLURM_JOB_NUM_NODES - INFERENCE_NODES))\n" in plan.script
    assert '--nodes="$TRAINER_NODES" --ntasks="$TRAINER_WORLD"' in plan.script
    assert 'opsctl.launch.attempt start "$RUN_DIR" "$TRAINER_WORLD"' in plan.script
    assert plan.excluded == {}


def test_drained_quarantined_and_unhealthy_nodes_are_excluded(production: LaunchSection) -> None:
    nodes = partition(70)
    nodes[0].flags, nodes[0].reason = {"DRAIN"}, "operator: bad fan"
    nodes[1].state = "down"
    plan = plan_layout(production, job(), nodes, {"gpu-003"}, {"gpu-004": "FAIL gpu-xid"},
                       run_id="r1", run_dir=RUN, partition="gpu")
    assert plan.excluded == {
        "gpu-001": "drained: operator: bad fan",
        "gpu-002": "down",
        "gpu-003": "quarantined",
        "gpu-004": "unhealthy: FAIL gpu-xid",
    }
    assert "#SBATCH --exclude=gpu-[001-004]\n" in plan.script


def test_refused_with_reasons_when_too_few_usable_nodes(production: LaunchSection) -> None:
    nodes = partition(65)
    nodes[9].flags = {"DRAIN"}
    expected = r"64 nodes needed, 63 of 65 .*gpu-010 \(drained\).*gpu-011 \(quarantined\)"
    with pytest.raises(Refused, match=expected):
        plan_layout(production, job(), nodes, {"gpu-011"}, {}, run_id="r1", run_dir=RUN)


def test_more_nodes_than_the_partition_has(production: LaunchSection) -> None:
    with pytest.raises(UsageError, match=r"asked for 64 nodes but partition gpu has only 4"):
        plan_layout(production, job(), partition(4), set(), {}, run_id="r1", run_dir=RUN,
                    partition="gpu")


@pytest.mark.parametrize(("nodes", "want"), [(3, 1), (4, 1), (8, 2), (10, 2), (16, 4), (2, 1), (17, 16),
                                            (64, 16)])
def test_without_inference_nodes_a_small_launch_takes_the_configured_share(
    production: LaunchSection, nodes: int, want: int
) -> None:
    """16 of 64 by default: `--nodes 3` alone plans 1 inference and 2 trainer nodes, not a refusal;
    where the configured 16 leave a trainer node they stand, as before."""
    plan = plan_layout(production, job(), partition(64), set(), {}, run_id="r1", run_dir=RUN, nodes=nodes)
    assert (plan.nodes, plan.inference_nodes) == (nodes, want)
    listed = plan_layout(production, job(), partition(64), set(), {}, run_id="r1", run_dir=RUN,
                         nodelist=[f"gpu-{i:03d}" for i in range(1, nodes + 1)])
    assert listed.inference_nodes == want


@pytest.mark.parametrize("m", [0, 4, 9])
def test_inference_nodes_must_leave_trainers(production: LaunchSection, m: int) -> None:
    with pytest.raises(UsageError, match=r"--inference-nodes must be between 1 and 3"):
        plan_layout(production, job(), partition(8), set(), {}, run_id="r1", run_dir=RUN, nodes=4,
                    inference_nodes=m)


def test_nodelist_naming_drained_nodes_fails(production: LaunchSection) -> None:
    nodes = partition(8)
    nodes[2].flags, nodes[2].reason = {"DRAIN"}, "opsctl: gpu-xid"
    with pytest.raises(UsageError, match=r"cannot run jobs: gpu-003 \(drained: opsctl: gpu-xid\)"):
        plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN,
                    nodelist=["gpu-001", "gpu-003"], inference_nodes=1)


def test_nodelist_unknown_node_and_count_mismatch(production: LaunchSection) -> None:
    with pytest.raises(UsageError, match=r"not in the cluster: gpu-099"):
        plan_layout(production, job(), partition(8), set(), {}, run_id="r1", run_dir=RUN,
                    nodelist=["gpu-001", "gpu-099"], inference_nodes=1)
    with pytest.raises(UsageError, match=r"names 2 nodes but --nodes is 3"):
        plan_layout(production, job(), partition(8), set(), {}, run_id="r1", run_dir=RUN,
                    nodelist=["gpu-001", "gpu-002"], nodes=3, inference_nodes=1)


def test_nodelist_goes_to_sbatch(production: LaunchSection) -> None:
    plan = plan_layout(production, job(), partition(8), set(), {}, run_id="r1", run_dir=RUN,
                       nodelist=["gpu-005", "gpu-006", "gpu-007"], inference_nodes=1)
    assert "#SBATCH --nodelist=gpu-[005-007]\n" in plan.script
    assert "--exclude" not in plan.script
    assert plan.job_config.trainer.world_size == 2 * 8


def test_nodes_whose_cpus_cannot_hold_the_ranks_are_refused_before_submitting(
    production: LaunchSection,
) -> None:
    """The issue's reproduction: 4-CPU nodes and 8 trainer ranks per node. Submitted, the job ran SFT
    and then failed with "srun: error: Unable to create step ... More processors requested than
    permitted"; planned, the nodes are excluded with the reason and the launch refused at once."""
    nodes = partition(4)
    for node in nodes:
        node.cpus = 4
    with pytest.raises(Refused, match=r"3 nodes needed, 0 of 4 .*gpu-001 \(4 CPUs, too few for 8 trainer "
                                      r"ranks per node \(\[launch\] tasks_per_node\)\)"):
        plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=3)
    nodes[0].cpus = nodes[1].cpus = nodes[2].cpus = 8  # enough CPUs on three: they are used
    plan = plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=3)
    why = "4 CPUs, too few for 8 trainer ranks per node ([launch] tasks_per_node)"
    assert plan.excluded == {"gpu-004": why}
    with pytest.raises(UsageError, match=r"cannot run jobs: gpu-004 \(4 CPUs"):
        plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN,
                    nodelist=["gpu-003", "gpu-004"], inference_nodes=1)


def test_vllm_replicas_count_against_a_nodes_cpus(production: LaunchSection) -> None:
    """tensor_parallel_size 1 on 8 GPUs runs 8 vLLM replicas on an inference node, each a task;
    fewer trainer ranks per node do not make a 4-CPU node usable."""
    production.tasks_per_node = 2
    from training.config import load_config

    vllm = load_config(str(DEMO), ["inference.backend=vllm", "model.path=/shared/models/qwen3-8b",
                                   "inference.tensor_parallel_size=1"])
    nodes = partition(3)
    nodes[2].cpus = 4
    plan = plan_layout(production, vllm, nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=2)
    assert plan.excluded == {"gpu-003": "4 CPUs, too few for 8 vLLM replicas per node "
                                        "(inference.tensor_parallel_size)"}
    assert plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=2).excluded == {}


def test_nodes_with_fewer_gpus_than_the_job_asks_for_are_excluded(production: LaunchSection) -> None:
    nodes = partition(3)
    nodes[1].gpus_total = 4  # the job's --gres=gpu:h200:8 would never be placed there
    plan = plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=2)
    assert plan.excluded == {"gpu-002": "4 GPUs, fewer than the 8 of [launch] gpus_per_node"}
    production.request_gres = False  # no GPUs asked for: a CPU-only partition is fine
    assert plan_layout(production, job(), nodes, set(), {}, run_id="r1", run_dir=RUN, nodes=2).excluded == {}


def test_unsafe_run_directory_is_refused(production: LaunchSection) -> None:
    with pytest.raises(UsageError, match=r"run directory"):
        plan_layout(production, job(), partition(64), set(), {}, run_id="r1",
                    run_dir=Path("/shared/runs/a b"))


def test_unknown_config_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"trainer.lrr: unknown key"):
        resolve_job_config(LaunchRequest(config=str(DEMO), overrides=["trainer.lrr=1e-4"]))


def test_missing_checkpoint_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"checkpoint directory .*nope does not exist"):
        resolve_job_config(LaunchRequest(config=str(DEMO), overrides=[f'model.path="{tmp_path}/nope"']))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"no config.json"):
        resolve_job_config(LaunchRequest(config=str(DEMO), overrides=[f'model.path="{tmp_path}/empty"']))


def test_rendered_script_is_valid_bash(production: LaunchSection, tmp_path: Path) -> None:
    plan = plan_layout(production, job(), partition(64), set(), {}, run_id="r1", run_dir=RUN)
    script = tmp_path / "job.sbatch"
    script.write_text(plan.script)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, check=False).returncode == 0


def test_a_host_that_sees_the_share_elsewhere_renders_the_nodes_paths(production: LaunchSection) -> None:
    # The machine lab: the host reads the share's backing directory, the nodes mount it at /shared.
    production.runs_dir, production.cluster_runs_dir = "/var/lab/shared/nfs/runs", "/shared/runs"
    production.workdir = ""
    plan = plan_layout(production, job(), partition(64), set(), {}, run_id="r1",
                       run_dir=Path("/var/lab/shared/nfs/runs/r1"))
    assert plan.run_dir == Path("/var/lab/shared/nfs/runs/r1")  # where this host writes the run
    assert "RUN_DIR=/shared/runs/r1\n" in plan.script
    assert "#SBATCH --output=/shared/runs/r1/logs/slurm-%j.out\n" in plan.script
    assert "#SBATCH --chdir=/shared/runs/r1\n" in plan.script  # not the submitting shell's cwd
    assert "/var/lab" not in plan.script
    outside = r"/tmp/r2 is not under \[launch\] runs_dir /var/lab/shared/nfs/runs"
    with pytest.raises(UsageError, match=outside):
        plan_layout(production, job(), partition(64), set(), {}, run_id="r2", run_dir=Path("/tmp/r2"))


def test_cluster_runs_dir_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="cluster_runs_dir: must be an absolute path"):
        LaunchSection(cluster_runs_dir="shared/runs").validate()
