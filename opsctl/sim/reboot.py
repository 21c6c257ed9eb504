"""The simulated cluster's RebootProgram (slurm.conf): what `scontrol reboot` makes a node do.

slurmd runs it through system() and waits, and the reboot stops that very slurmd, so the program
hands the reboot to a detached process and returns. That process gives the node's simulated
hardware a new boot (a new kernel boot id, the GPUs' faults gone, as `opsctl sim inject NODE
reboot` does) and starts its slurmd again with `-b`: every simulated node shares this host's uptime,
which slurmctld compares with the time it asked for the reboot, and `-b` makes slurmd report the
restart as a boot (Slurm's own testing option; the lab documents the same for its machines).
slurmctld then resumes the node (nextstate=RESUME), as it would a real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

NODE_ENV = "OPSCTL_SIM_NODE"  # set by SimCluster.start_slurmd for each slurmd
STATE_ENV = "OPSCTL_SIM_STATE_DIR"


def reboot_node(state_dir: str, node: str) -> None:
    from opsctl.sim import monitoring
    from opsctl.sim.cluster import SimCluster

    sim = SimCluster(state_dir=state_dir)
    if monitoring.hw_dir(sim).is_dir():
        monitoring.inject(sim, node, "reboot", restart_slurmd=False)
    sim.stop_slurmd(node)
    sim.start_slurmd(node, booted=True)


def main(argv: list[str]) -> int:
    node, state_dir = os.environ.get(NODE_ENV, ""), os.environ.get(STATE_ENV, "")
    if not node or not state_dir:
        print(f"opsctl.sim.reboot: {NODE_ENV} and {STATE_ENV} must be set (slurmd of a sim)", file=sys.stderr)
        return 2
    if argv[1:] != ["--detached"]:
        # out of slurmd's process group: stopping slurmd must not stop the reboot
        subprocess.Popen([sys.executable, "-m", "opsctl.sim.reboot", "--detached"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return 0
    time.sleep(1.0)  # let slurmd finish the request it is answering
    reboot_node(state_dir, node)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
