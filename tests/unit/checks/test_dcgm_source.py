"""The dcgm source's pure half: dcgmi outputs -> evidence -> the dcgm-health check. Inputs are the
hwsim renderings of DCGM 4's layouts (the lab's simulated dcgmi) and a failing dcgmi."""

from __future__ import annotations

from opsctl.checks.model import Status
from opsctl.checks.runner import judge_node
from opsctl.evidence.dcgm import DcgmSource, incidents_from_outputs, pydcgm_available
from opsctl.evidence.ssh import CommandResult
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.render_dcgm import render_dcgmi_diag, render_dcgmi_health
from opsctl.hwsim.state import make_node

NOW = 1_700_000_000.0


def test_healthy_node(th):
    state = make_node("gpu-001")
    ev = incidents_from_outputs(
        "gpu-001", {"dcgmi_health": CommandResult(0, render_dcgmi_health(state))}, NOW
    )
    assert ev.reachable and ev.dcgm_incidents == [] and ev.raw["overall"] == "Healthy"
    assert judge_node(ev, th, NOW).status is Status.OK


def test_xid_and_dbe_incidents_fail_the_gpu(th):
    state = make_node("gpu-002")
    apply_fault(state, "xid=79,gpu=3")
    apply_fault(state, "ecc_dbe,gpu=1")
    out = {
        "dcgmi_health": CommandResult(0, render_dcgmi_health(state)),
        "dcgmi_diag": CommandResult(0, render_dcgmi_diag(state, 1)),
    }
    ev = incidents_from_outputs("gpu-002", out, NOW)
    r = judge_node(ev, th, NOW)
    assert r.status is Status.FAIL
    assert {v.gpu for v in r.problems} == {1, 3}
    assert any("XID 79" in v.summary for v in r.problems)
    assert any(v.evidence.get("system", "").startswith("diag ") for v in r.problems)


def test_dcgmi_failing_is_unknown(th):
    out = {
        "dcgmi_health": CommandResult(
            255, "", "Error: unable to establish a connection to the specified host"
        )
    }
    ev = incidents_from_outputs("gpu-003", out, NOW)
    assert not ev.reachable and "unable to establish" in ev.error
    assert judge_node(ev, th, NOW).status is Status.UNKNOWN
    ev = incidents_from_outputs("gpu-003", {"dcgmi_health": CommandResult(0, "not json")}, NOW)
    assert not ev.reachable


def test_without_pydcgm_the_source_uses_dcgmi_commands():
    ok, why = pydcgm_available()
    assert not ok and "pydcgm" in why  # not installable here: DCGM ships it
    src = DcgmSource(diag_level=2)
    assert src.commands() == {"dcgmi_health": "dcgmi health -c -j", "dcgmi_diag": "dcgmi diag -r 2 -j"}
    assert DcgmSource().commands() == {"dcgmi_health": "dcgmi health -c -j"}


def test_a_diag_that_could_not_run_makes_the_node_unknown(th, real):
    state = make_node("gpu-003")
    out = {
        "dcgmi_health": CommandResult(0, render_dcgmi_health(state)),
        "dcgmi_diag": CommandResult(202, real("dcgmi-diag-j.runtime_error.dcgm4.derived.json")),
    }
    ev = incidents_from_outputs("gpu-003", out, NOW)
    assert not ev.reachable
    assert ev.error == "dcgmi diag could not run: Error: Diagnostic could not be run while DCGM is paused."
    assert judge_node(ev, th, NOW).status is Status.UNKNOWN
