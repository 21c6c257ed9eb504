import shlex

from opsctl.lab.config import LabConfig
from opsctl.lab.ssh import ssh_argv


def test_remote_command_splits_back_into_the_same_words() -> None:
    cfg = LabConfig(gpu_nodes=1)
    argv = ssh_argv(cfg, cfg.head, ["sinfo", "-o", "%N %t", "a;b", "$(x)"])
    assert argv[0] == "ssh" and argv[-2] == "--" and "root@10.213.0.10" in argv
    assert shlex.split(argv[-1]) == ["sinfo", "-o", "%N %t", "a;b", "$(x)"]
    assert argv[argv.index("-i") + 1] == str(cfg.ssh_key)
