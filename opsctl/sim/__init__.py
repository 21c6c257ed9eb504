"""The simulated cluster: real Slurm and munge daemons on this host, simulated GPUs.

`opsctl.sim.cluster.SimCluster` is the API (pytest fixtures, bench/, `opsctl sim`); add-ons plug in
through `opsctl.sim.addons`. Nothing here is installed on a production cluster.
"""
