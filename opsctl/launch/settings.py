"""The `[launch]` section of opsctl.toml: where runs live, the production layout, requeue policy.

Registered with opsctl.config on import, so `load_config` validates it like any other section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsctl.config import SECTIONS, check_fields, limits, register_section

HEALTH_SOURCES = ("none", "prometheus", "ssh", "dcgm")


@dataclass
class LaunchSection:
    # Shared filesystem directory that holds one directory per run (<runs_dir>/<run_id>/).
    runs_dir: str = field(default="/shared/runs", metadata=limits(path=True))
    # runs_dir as the compute nodes see it, when this host reaches the shared file system under
    # another path (the machine lab: the host reads the NFS stand-in's backing directory, the
    # machines mount it at /shared). Empty: the same path everywhere, as on a login node.
    cluster_runs_dir: str = ""
    # Nodes opsctl must never place work on again; persists across attempts and runs.
    quarantine_file: str = field(default="/var/lib/opsctl/quarantine.json", metadata=limits(path=True))
    partition: str | None = None  # None: [slurm] partition, else Slurm's default partition
    nodes: int = 64  # production layout: 16 inference + 48 trainer
    inference_nodes: int = 16  # of `nodes`, those that serve inference (its share of a smaller --nodes)
    # GPUs each node brings (and the GRES asked for)
    gpus_per_node: int = field(default=8, metadata=limits(ge=1))
    gpu_type: str = "h200"  # the GRES type: gpu:<gpu_type>:<gpus_per_node>
    tasks_per_node: int = field(default=8, metadata=limits(ge=1))  # trainer ranks per node (one per GPU)
    # Memory of one GPU as nvidia-smi reports it (H200: 143771 MiB): `launch rl-run --plan` refuses a
    # layout whose trainer GPUs would need more (less its headroom).
    gpu_memory_mib: int = field(default=143771, metadata=limits(ge=1))
    # What one node writes to the shared file system, GB/s: the plan's publication time assumes it.
    node_write_gbps: float = field(default=2.0, metadata=limits(gt=0))
    request_gres: bool = True  # ask Slurm for gpu:<type>:<gpus_per_node> per node
    time_limit: str = "7-00:00:00"  # the job's Slurm time limit (sbatch --time)
    # SIGUSR1 reaches the batch script this long before the time limit; it asks the trainer to
    # checkpoint and requeues the job, which resumes from that checkpoint.
    signal_before_s: int = field(default=600, metadata=limits(ge=0))
    # seconds the trainer gets to write that checkpoint before the requeue
    checkpoint_grace_s: int = field(default=300, metadata=limits(ge=0))
    # watch --remediate gives up after this many attempts
    max_attempts: int = field(default=5, metadata=limits(ge=1))
    # How watch --remediate restarts a run after a node failure: "resubmit" cancels the job and
    # submits the same script as a new job excluding the quarantined nodes; "requeue" uses
    # `scontrol requeue` (one job id). Slurm 22.05 loses a requeued GPU job's GPU allocation when
    # it restarts on other nodes, so resubmit is the default there.
    requeue_mode: str = field(default="resubmit", metadata=limits(choices=("resubmit", "requeue")))
    # A resubmission when the partition has fewer usable nodes than the run was launched on (no
    # spare left): true resubmits on the nodes left, keeping the inference nodes and giving the
    # trainer fewer (its sharded checkpoint resumes at the smaller world size), while at least
    # min_trainer_nodes remain; false, or below that, the job waits pending for nodes to return.
    # Set the minimum to the fewest nodes whose GPUs hold the model's sharded training state.
    shrink_on_failure: bool = True
    # the fewest trainer nodes a shrunk resubmission may use
    min_trainer_nodes: int = field(default=1, metadata=limits(ge=1))
    # Python on the compute nodes with opsctl and training importable, and the directory to run in.
    # On a cluster provisioned by site.yml that is the training runtime on the NFS share
    # (roles/training_runtime): python = "/shared/opsctl/runtime/current/bin/python"; the
    # default suits a host where opsctl is installed into python3 (the simulated cluster).
    python: str = "python3"
    # "": the run's directory where cluster_runs_dir is set, else the directory sbatch was called in
    workdir: str = field(default="", metadata=limits(path=True))
    # InfiniBand HCAs for NCCL_IB_HCA; empty: discover them (from /sys/class/infiniband) on the
    # first allocated node at job start.
    ib_hcas: list[str] = field(default_factory=list)
    nccl_socket_ifname: str = ""  # NCCL_SOCKET_IFNAME for the bootstrap network; "": NCCL picks
    ib_sysfs: str = "/sys/class/infiniband"  # where that discovery reads the HCAs
    # Health gate before a launch: "none" uses Slurm state and the quarantine only; otherwise the
    # `opsctl health` source whose FAIL/UNKNOWN nodes are excluded.
    health_source: str = field(default="prometheus", metadata=limits(choices=HEALTH_SOURCES))
    exclude_unknown: bool = True  # a node whose health cannot be judged is not used
    poll_s: float = field(default=5.0, metadata=limits(gt=0))  # watch refresh
    # watch --remediate: how long a job that ended FAILED is held while its nodes are re-checked.
    # Slurm declares a dead node only after SlurmdTimeout plus up to one ping round (a third of
    # it): 300 + 100 s with the slurm role's SlurmdTimeout. A shorter hold gives up on a run a node
    # death killed, before the node is drained and the run requeued.
    failure_grace_s: float = field(default=400.0, metadata=limits(ge=0))

    def validate(self) -> None:
        check_fields(self)
        if self.nodes < 2:
            raise ValueError(f"nodes: need at least 2 (inference and trainer), got {self.nodes}")
        if not 1 <= self.inference_nodes < self.nodes:
            raise ValueError(f"inference_nodes: must be in 1..nodes-1, got {self.inference_nodes}")
        if self.cluster_runs_dir and not self.cluster_runs_dir.startswith("/"):
            raise ValueError(f"cluster_runs_dir: must be an absolute path, got {self.cluster_runs_dir!r}")
        for hca in self.ib_hcas:
            if not hca.replace("_", "").replace(":", "").isalnum():
                raise ValueError(f"ib_hcas: {hca!r} is not an HCA name (e.g. mlx5_0 or mlx5_0:1)")


if "launch" not in SECTIONS:
    register_section("launch", LaunchSection)
