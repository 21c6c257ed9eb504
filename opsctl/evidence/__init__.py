"""Evidence sources: collect raw facts about nodes, never judge them.

Every source (Prometheus, SSH, dcgmi, pydcgm) returns the same :class:`Evidence` per node, so
the checks in :mod:`opsctl.checks` do not care where a fact came from.
"""

from opsctl.evidence.model import (
    Evidence,
    GpuEvidence,
    IbPortEvidence,
    MountEvidence,
    XidEvent,
)

__all__ = ["Evidence", "GpuEvidence", "IbPortEvidence", "MountEvidence", "XidEvent"]
