"""Human tables print what Slurm, exporters and operators wrote, character for character: no rich
markup (which swallowed a drain's "[root]") and no emoji codes (which turned "opsctl:watch:" into
a clock)."""

from __future__ import annotations

import pytest

from opsctl.checks.model import Status, Verdict
from opsctl.checks.runner import NodeReport
from opsctl.cli.nodes import _print_table
from opsctl.health.render import render
from opsctl.health.service import HealthResult
from opsctl.model import Node

REASON = "opsctl:watch:launch-node-failed:health FAIL gpu-xid [bold]x"


def test_nodes_table_prints_reason_and_user_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    node = Node("gpu-002", "idle", {"DRAIN"}, reason=REASON, reason_user="root", gpus_total=8)
    _print_table([node], {"gpu-002"})
    out = " ".join(capsys.readouterr().out.split())  # the REASON column wraps
    assert f"{REASON} [root]" in out and "drained (quarantined)" in out


def test_health_table_prints_summaries_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    v = Verdict("gpu-xid", Status.FAIL, "gpu-002", 5, "xid 79 :watch: [XID counts] [red]")
    report = NodeReport("gpu-002", Status.FAIL, [v])
    render(HealthResult([report, NodeReport("gpu-001", Status.OK)], "prometheus", 0.0))
    out = " ".join(capsys.readouterr().out.split())
    assert "xid 79 :watch: [XID counts] [red]" in out
    assert "gpu-001 │ OK" in out and "1 ok, 1 fail" in out
