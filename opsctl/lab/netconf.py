"""Files each machine gets in its upper dir: address, names, resolver, identity. Pure rendering."""

from __future__ import annotations

from opsctl.lab.config import LabConfig, Machine

# Sorts before nspawn's own 80-container-host0.network, so our static address wins.
NETWORK_FILE = "etc/systemd/network/10-host0.network"


def render_network(cfg: LabConfig, machine: Machine) -> str:
    # No Gateway= and no DNS=: the lab has no route out, by design.
    return (
        "# Written by opsctl lab: static address on the lab bridge, no route out.\n"
        "[Match]\n"
        "Name=host0\n"
        "\n"
        "[Network]\n"
        f"Address={machine.address}/{cfg.prefixlen}\n"
        "LinkLocalAddressing=no\n"
        "IPv6AcceptRA=no\n"
    )


def render_hosts(cfg: LabConfig) -> str:
    lines = [
        "# Written by opsctl lab: every lab machine, so that Slurm never waits on a resolver.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    lines += [f"{m.address}\t{m.name}" for m in cfg.machines]
    return "\n".join(lines) + "\n"


def render_nvidia_tmpfiles(gpus: int = 8) -> str:
    """tmpfiles.d entries creating placeholder /dev/nvidia* files at boot (gres.conf File= needs them)."""
    lines = ["# opsctl lab: placeholder GPU device files (no GPU here); Slurm's gres.conf File= needs paths."]
    lines += [f"f /dev/nvidia{i} 0666 root root -" for i in range(gpus)]
    lines += ["f /dev/nvidiactl 0666 root root -", "f /dev/nvidia-uvm 0666 root root -"]
    return "\n".join(lines) + "\n"
