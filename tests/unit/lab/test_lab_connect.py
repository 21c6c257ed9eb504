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
