from pathlib import Path

from opsctl.lab.connect import rewrite_slurm_conf

CONF = """# slurm.conf rendered by the slurm role
ClusterName=opslab
SlurmctldHost=head
AuthType=auth/munge
AuthInfo=socket=/run/munge/munge.socket.2
NodeName=gpu-[001-002] Gres=gpu:h200:8 CPUs=1 RealMemory=1000
"""


def test_controller_gets_its_address_and_auth_goes_to_the_lab_munged() -> None:
    out = rewrite_slurm_conf(CONF, {"head": "10.213.0.10", "gpu-001": "10.213.0.11"}, Path("/s/munge.socket"))
    lines = out.splitlines()
    assert "SlurmctldHost=head(10.213.0.10)" in lines
    assert [ln for ln in lines if ln.startswith("AuthInfo")] == ["AuthInfo=socket=/s/munge.socket"]
    # Everything else is kept verbatim.
    assert "NodeName=gpu-[001-002] Gres=gpu:h200:8 CPUs=1 RealMemory=1000" in lines
    assert "ClusterName=opslab" in lines


def test_an_explicit_controller_address_is_left_alone() -> None:
    out = rewrite_slurm_conf("SlurmctldHost=head(10.9.9.9)\n", {"head": "10.213.0.10"}, Path("/s"))
    assert "SlurmctldHost=head(10.9.9.9)" in out.splitlines()


def test_connect_writes_a_preflight_profile_equal_to_the_lab_inventorys(tmp_path):
    from opsctl.checks.settings import ssh_settings
    from opsctl.config import parse_config
    from opsctl.lab.config import LabConfig
    from opsctl.lab.connect import lab_hw_expected, preflight_toml, ssh_toml_lines
    from opsctl.preflight.service import PreflightContext, preflight_ssh_settings
    from opsctl.preflight.settings import PreflightSection

    cfg = LabConfig(gpu_nodes=2, state_dir=tmp_path)
    expected = lab_hw_expected()
    text = "[health]\n" + "\n".join(ssh_toml_lines(cfg)) + "\n\n" + preflight_toml(cfg, expected)
    config = parse_config(text)
    section = config.section("preflight", PreflightSection)
    assert section.expected() == expected  # the hw_expected that site.yml holds the lab to
    assert section.nodes == "gpu-[001-002]"
    # health's SSH sources and preflight reach the machines at their addresses, in the same tree
    health = config.section("health")
    for ssh in (ssh_settings(health), preflight_ssh_settings(PreflightContext(section, health))):
        assert ssh.hosts == {"gpu-001": "10.213.0.11", "gpu-002": "10.213.0.12"} and ssh.ports == {}
        assert ssh.ib_sysfs_root == "/var/lib/hwsim/sys/class/infiniband"


def test_known_hosts_come_from_the_machines_files(tmp_path):
    from opsctl.lab.config import LabConfig
    from opsctl.lab.connect import HOST_KEY, known_hosts_text

    cfg = LabConfig(gpu_nodes=2, state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    own = cfg.upper_dir("gpu-002") / HOST_KEY
    own.parent.mkdir(parents=True)
    own.write_text("ssh-ed25519 AAAAown root@gpu-002\n")
    from opsctl.lab.image import image_dir

    base = image_dir(cfg) / "rootfs" / HOST_KEY
    base.parent.mkdir(parents=True)
    base.write_text("ssh-ed25519 AAAAbase root@image\n")
    assert known_hosts_text(cfg) == "10.213.0.11 ssh-ed25519 AAAAbase\n10.213.0.12 ssh-ed25519 AAAAown\n"


def test_node_lines_get_the_machines_addresses_for_srun_on_the_host() -> None:
    addresses = {"head": "10.213.0.10", "gpu-001": "10.213.0.11", "gpu-002": "10.213.0.12"}
    lines = rewrite_slurm_conf(CONF, addresses, Path("/s")).splitlines()
    # in the order Slurm expands the names: the host's srun resolves gpu-002 to 10.213.0.12
    want = "NodeName=gpu-[001-002] Gres=gpu:h200:8 CPUs=1 RealMemory=1000 NodeAddr=10.213.0.11,10.213.0.12"
    assert want in lines
    # a line that names its own address, or a machine without one, is Slurm's to read as written
    own = "NodeName=gpu-001 NodeAddr=10.1.1.1 CPUs=1"
    assert own in rewrite_slurm_conf(own + "\n", addresses, Path("/s")).splitlines()
    default = "NodeName=DEFAULT CPUs=1"
    assert default in rewrite_slurm_conf(default + "\n", addresses, Path("/s")).splitlines()


def test_connect_points_launches_at_the_share_as_host_and_machines_see_it(tmp_path):
    from opsctl.config import parse_config
    from opsctl.lab.config import LabConfig
    from opsctl.lab.connect import launch_toml
    from opsctl.launch.settings import LaunchSection

    cfg = LabConfig(gpu_nodes=3, state_dir=tmp_path)
    launch = parse_config(launch_toml(cfg)).section("launch", LaunchSection)
    launch.validate()
    # the host writes where the machines' /shared is backed; the job script names /shared
    assert launch.runs_dir == str(tmp_path / "shared" / "nfs" / "runs")
    assert launch.cluster_runs_dir == "/shared/runs"
    assert launch.python == "/shared/opsctl/runtime/current/bin/python"
    assert launch.quarantine_file == str(tmp_path / "quarantine.json")  # goes with `lab down`
    assert (launch.nodes, launch.inference_nodes, launch.tasks_per_node) == (2, 1, 1)
    assert launch.ib_sysfs == "/var/lib/hwsim/sys/class/infiniband"
