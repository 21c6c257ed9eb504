"""Simulated H200 node hardware for the sim and the lab: state, faults, renderers, shims, exporter.

Nothing here is installed by a production inventory. The hardware that this machine lacks (GPUs,
InfiniBand HCAs) is modelled as one JSON state file per node; renderers turn that state into the
genuine output formats of the tools that would read the real hardware (``nvidia-smi -q``,
``ibstat``, ``/sys/class/infiniband``, ``perfquery -x``, ``dcgmi``, kernel XID lines, and the
dcgm-exporter / node_exporter metrics), so everything above this boundary runs unmodified.

Every module imports only the standard library (and its siblings), except ``exporter`` which also
needs ``prometheus_client``: the lab copies this package into machines that have Debian's bare
python3 (see docs/simulated-hardware.md).
"""
