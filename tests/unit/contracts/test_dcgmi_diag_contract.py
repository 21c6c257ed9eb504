"""`dcgmi diag -j` against DCGM's own artefacts: its JSON schema of the 4.x document (vendored from
DCGM 4.6.0), documents derived from dcgmi's source for the shapes no capture exists of (the
diagnostic could not run; a failure reported only in a test's summary), and the genuine 3.1.0
document. A diagnostic that did not run, or ran nothing, must never read as passed."""

from __future__ import annotations

import json

import jsonschema
import pytest

from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.render_dcgm import render_dcgmi_diag
from opsctl.hwsim.state import make_node
from opsctl.parsers.dcgmi_json import parse_dcgmi_diag

SCHEMA = "dcgm_diag_schema.dcgm4.6.0.json"
RUNTIME_ERROR = {
    "dcgmi-diag-j.runtime_error.dcgm4.derived.json": (
        "dcgm4",
        "4.6.0",
        "Error: Diagnostic could not be run while DCGM is paused.",
    ),
    "dcgmi-diag-j.runtime_error.dcgm3.derived.json": (
        "dcgm3",
        "3.3.9",
        "Error: Diagnostic could not be run because the Tesla recommended driver is not being used.",
    ),
}
SUMMARY_ONLY = "dcgmi-diag-j.summary-only-fail.dcgm4.derived.json"


def validate(doc: object, schema: dict[str, object]) -> None:
    # the schema names "http://json-schema.org/schema#", the latest draft: say which, explicitly
    jsonschema.Draft202012Validator(schema).validate(doc)


@pytest.fixture
def schema(real) -> dict[str, object]:
    return json.loads(real(SCHEMA))


@pytest.mark.parametrize("name", ["dcgmi-diag-j.runtime_error.dcgm4.derived.json", SUMMARY_ONLY])
def test_the_derived_4x_documents_satisfy_dcgms_schema(real, schema, name):
    validate(json.loads(real(name)), schema)


@pytest.mark.parametrize("faults", [[], ["ecc_dbe,gpu=3"], ["nvlink_down,gpu=2", "thermal,gpu=5"]])
@pytest.mark.parametrize("level", [1, 3])
def test_the_simulators_documents_satisfy_dcgms_schema(schema, faults, level):
    state = make_node("gpu-001")
    for f in faults:
        apply_fault(state, f)
    validate(json.loads(render_dcgmi_diag(state, level)), schema)


def test_the_schema_rejects_a_test_without_its_summary(real, schema):
    # the contract has teeth: dropping a required key the parser relies on is caught
    doc = json.loads(real(SUMMARY_ONLY))
    del doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["test_summary"]
    with pytest.raises(jsonschema.ValidationError, match="test_summary"):
        validate(doc, schema)


@pytest.mark.parametrize("name", sorted(RUNTIME_ERROR))
def test_a_diagnostic_that_could_not_run_is_not_a_pass(real, name):
    schema_name, version, message = RUNTIME_ERROR[name]
    report = parse_dcgmi_diag(real(name))
    assert (report.schema, report.version, report.runtime_error) == (schema_name, version, message)
    assert report.results == [] and report.failed() == []
    assert report.not_completed() == f"could not run: {message}"


def test_a_document_without_results_ran_nothing():
    report = parse_dcgmi_diag(json.dumps({"DCGM Diagnostic": {"test_categories": []}}))
    assert report.not_completed() == "no test results"


def test_a_failure_reported_only_in_the_test_summary_fails_the_diagnostic(real):
    report = parse_dcgmi_diag(real(SUMMARY_ONLY))
    assert {(r.test, r.gpu, r.status) for r in report.results if r.gpu is not None} == {
        ("software", 0, "Pass"),
        ("software", 1, "Pass"),
        ("memory", 0, "Pass"),
        ("memory", 1, "Pass"),
    }
    (failed,) = report.failed()
    assert (failed.test, failed.category, failed.gpu, failed.error_ids) == ("memory", "Hardware", None, [51])
    assert failed.warnings[0].startswith("Error using CUDA API cuInit")
    assert report.not_completed() == ""


def test_a_summary_repeating_a_gpus_failure_is_not_counted_twice():
    state = make_node("gpu-001")
    apply_fault(state, "ecc_dbe,gpu=3")
    report = parse_dcgmi_diag(render_dcgmi_diag(state, 1))
    assert [(r.test, r.gpu) for r in report.failed()] == [("software", 3)]
