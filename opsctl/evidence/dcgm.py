"""DCGM's own verdicts: health watches (``dcgmi health -c -j`` or pydcgm) and, optionally, a
diagnostic run (``dcgmi diag -r N -j``, DCGM 3.x or 4.x layout).

pydcgm ships with NVIDIA's DCGM packages (not on PyPI); when it imports, the watches are read
through its API against each node's nv-hostengine (port 5555). Otherwise ``dcgmi`` runs on the
node over SSH. Either way the result is :attr:`Evidence.dcgm_incidents`.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from opsctl.evidence.model import Evidence
from opsctl.evidence.ssh import CommandResult, SshSettings, SshSource
from opsctl.parsers.dcgmi_json import DcgmiFormatError, parse_dcgmi_diag, parse_dcgmi_health

HOSTENGINE_PORT = 5555


def pydcgm_available() -> tuple[bool, str]:
    try:
        importlib.import_module("pydcgm")
        importlib.import_module("dcgm_structs")
    except ImportError as exc:
        return (
            False,
            f"pydcgm not importable ({exc}); it ships with DCGM (its bindings directory)",
        )
    return True, ""


def incidents_from_outputs(node: str, out: dict[str, CommandResult], now: float) -> Evidence:
    """Pure: dcgmi outputs -> evidence. A dcgmi that fails or prints garbage is UNKNOWN."""
    health = out.get("dcgmi_health")
    if health is None or not health.stdout.strip():
        err = (health.stderr if health else "not run").strip()[:160]
        return Evidence(node, "dcgm", now, reachable=False, error=f"dcgmi health: {err or 'no output'}")
    try:
        report = parse_dcgmi_health(health.stdout)
    except DcgmiFormatError as exc:
        return Evidence(node, "dcgm", now, reachable=False, error=f"dcgmi health: {exc}"[:200])
    incidents: list[dict[str, Any]] = [
        {"gpu": i.gpu, "system": i.system, "status": i.status, "message": i.message} for i in report.incidents
    ]
    diag = out.get("dcgmi_diag")
    if diag is not None:
        try:
            d = parse_dcgmi_diag(diag.stdout)
        except DcgmiFormatError as exc:
            return Evidence(node, "dcgm", now, reachable=False, error=f"dcgmi diag: {exc}"[:200])
        if why := d.not_completed():
            return Evidence(node, "dcgm", now, reachable=False, error=f"dcgmi diag {why}"[:200])
        for r in d.results + d.summary_failures:
            if r.status.lower() in ("fail", "warn"):
                incidents.append(
                    {
                        "gpu": r.gpu,
                        "system": f"diag {r.test}",
                        "status": r.status,
                        "message": "; ".join(r.warnings),
                    }
                )
    return Evidence(
        node,
        "dcgm",
        now,
        dcgm_incidents=incidents,
        provides=frozenset({"dcgm"}),
        raw={"overall": report.overall},
    )


class DcgmSource:
    name = "dcgm"

    def __init__(
        self, ssh: SshSettings | None = None, *, diag_level: int = 0, prefer_pydcgm: bool = True
    ) -> None:
        self.ssh = ssh or SshSettings()
        self.diag_level = diag_level
        self.prefer_pydcgm = prefer_pydcgm

    def commands(self) -> dict[str, str]:
        cmds = {"dcgmi_health": "dcgmi health -c -j"}
        if self.diag_level:
            cmds["dcgmi_diag"] = f"dcgmi diag -r {int(self.diag_level)} -j"
        return cmds

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        ok, _why = pydcgm_available()
        if ok and self.prefer_pydcgm:
            return [self._pydcgm(node, now) for node in nodes]
        runner = _CommandSource(self.ssh, self.commands())
        return runner.collect(nodes, now)

    def _pydcgm(self, node: str, now: float) -> Evidence:
        """Health watches through pydcgm's documented objects (DcgmHandle, DcgmGroup.health)."""
        pydcgm: Any = importlib.import_module("pydcgm")
        structs: Any = importlib.import_module("dcgm_structs")
        host = self.ssh.hosts.get(node, node)
        try:
            handle = pydcgm.DcgmHandle(
                ipAddress=f"{host}:{HOSTENGINE_PORT}", opMode=structs.DCGM_OPERATION_MODE_AUTO
            )
            group = pydcgm.DcgmGroup(
                handle, groupName=f"opsctl-{int(time.time())}", groupType=structs.DCGM_GROUP_DEFAULT
            )
            try:
                group.health.Set(structs.DCGM_HEALTH_WATCH_ALL)
                response = group.health.Check()
            finally:
                group.Delete()
        except Exception as exc:  # DCGMError subclasses; the bindings raise nothing narrower
            return Evidence(node, "dcgm", now, reachable=False, error=f"pydcgm: {exc}"[:200])
        words = {0: "Healthy", 10: "Warning", 20: "Failure"}  # dcgmHealthWatchResult_t
        incidents = []
        for i in range(int(getattr(response, "incidentCount", 0))):
            inc = response.incidents[i]
            incidents.append(
                {
                    "gpu": int(inc.entityInfo.entityId),
                    "system": str(inc.system),
                    "status": words.get(int(inc.health), str(inc.health)),
                    "message": str(getattr(inc.error, "msg", "")),
                }
            )
        return Evidence(node, "dcgm", now, dcgm_incidents=incidents, provides=frozenset({"dcgm"}))


class _CommandSource(SshSource):
    """The SSH plumbing with DCGM's commands and parser instead of the hardware ones."""

    def __init__(self, settings: SshSettings, cmds: dict[str, str]) -> None:
        super().__init__(settings)
        self._cmds = cmds

    def collect(self, nodes: list[str], now: float) -> list[Evidence]:
        return self._collect_with(nodes, now, self._cmds, incidents_from_outputs)
