"""One room for on-call decisions: the checks only judge (they import nothing that decides or acts),
and every caller that remediates (health --remediate and the service through run_health, the
watcher and preflight through drain_failed_nodes) goes through the one pass, remediation_pass."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opsctl.checks
from opsctl.checks.settings import HealthSection
from opsctl.config import AuditSection, Config
from opsctl.remediation import passes
from opsctl.remediation.passes import PassActors, PassOutcome, PassRequest

# What decides or acts (or runs a pass that does): nothing under opsctl/checks/ may import it.
ACTING = ("opsctl.remediation", "opsctl.health", "opsctl.drain", "opsctl.slurm", "opsctl.audit",
          "opsctl.watch", "opsctl.launch", "opsctl.preflight")


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("path", sorted(Path(opsctl.checks.__file__).parent.glob("*.py")),
                         ids=lambda p: p.name)
def test_the_checks_import_nothing_that_decides_or_acts(path):
    bad = sorted(m for m in _imports(path) if m.startswith(ACTING) or m == "opsctl.policy")
    assert bad == [], f"{path.name} imports {bad}"


def _spy(monkeypatch, module: object) -> list[PassRequest]:
    """Stand in for the pass where ``module`` calls it; the requests it was given."""
    seen: list[PassRequest] = []

    def fake(req: PassRequest, on: PassActors, diag_source=None) -> PassOutcome:
        seen.append(req)
        return PassOutcome([])

    monkeypatch.setattr(module, "remediation_pass", fake)
    return seen


def test_the_watcher_drains_through_the_one_pass(monkeypatch, tmp_path):
    seen = _spy(monkeypatch, passes)
    config = Config(sections={"audit": AuditSection(log=str(tmp_path / "audit.jsonl")),
                              "health": HealthSection(state_file=str(tmp_path / "s.json"))})
    assert passes.drain_failed_nodes(config, object(), {"node10": "gone", "node2": "xid"}, "r1") == []
    (req,) = seen
    assert (req.owner, req.mode, req.nodes, req.lacking) == ("watch", "apply", ["node10", "node2"], None)


def test_health_remediate_runs_the_one_pass(monkeypatch, tmp_path):
    from opsctl.evidence.model import Evidence
    from opsctl.health import service

    class _Source:
        name = "fake"

        def collect(self, nodes, now):
            return [Evidence(n, "fake", now) for n in nodes]

    seen = _spy(monkeypatch, service)
    ctx = service.HealthContext(health=HealthSection(state_file=str(tmp_path / "s.json")))
    result = service.run_health(ctx, ["node1"], _Source(), remediate=True, dry_run=True, now=1.0)
    (req,) = seen
    assert (req.owner, req.mode, req.nodes) == ("health", "dry-run", ["node1"])
    assert result.mode == "dry-run"
