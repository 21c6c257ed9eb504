"""``opsctl preflight``: does each node have the hardware the cluster was built for?

Collect (``collect``: the hw_facts discovery commands over SSH) -> facts (the shared
``opsctl.parsers.hw_facts_build``, the very function the Ansible module uses) -> judge (``judge``:
pure, one stable code per expectation, plus NUMA affinity and Slurm's GRES) -> report.
Read-only: preflight changes nothing on the nodes or in Slurm.

``--fabric`` (``fabric``) adds the fabric acceptance: per-node fabric checks (``fabric_collect``,
``fabric_judge``), pair bandwidth tests scheduled by ``pairs`` and attributed by ``isolate``, and
NCCL; ``--remediate`` drains failing nodes through the health policy (docs/fabric.md).
"""
