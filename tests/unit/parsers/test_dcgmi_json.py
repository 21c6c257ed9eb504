from __future__ import annotations

import json

import pytest

from opsctl.parsers.dcgmi_json import DcgmiFormatError, parse_dcgmi_diag, parse_dcgmi_health, parse_diag_test


def test_dcgm4_test_object_from_issue_215(real):
    # The vendored sample is a fragment of a DCGM 4 document: one test object with a trailing comma.
    obj = json.loads(real("dcgmi-diag-j.dcgm4.fragment.DCGM-issue215.json").rstrip().rstrip(","))
    results = parse_diag_test(obj, "Hardware")
    assert [(r.test, r.gpu, r.status) for r in results] == [("diagnostic", g, "Pass") for g in range(8)]


def test_dcgm3_document_kept_in_dcgms_own_tests(real):
    # Genuine DCGM 3.1.0 output: a WARNING line before the document, null entries between tests,
    # gpu_ids as a string list for the deployment tests and as integers for the per-GPU plugin.
    report = parse_dcgmi_diag(real("dcgmi-diag-j.dcgm3.1.0.nvvs-jsonresulttests.DCGM.txt"))
    assert (report.schema, report.version) == ("dcgm3", "3.1.0")
    deployment = [r for r in report.results if r.category == "Deployment"]
    assert len({r.test for r in deployment}) == 9 and {r.gpu for r in deployment} == set(range(8))
    software = [(r.test, r.gpu, r.status) for r in report.results if r.category == "Custom"]
    assert software == [("software", g, "PASS") for g in range(8)]
    assert report.failed() == []


def test_text_before_the_document_must_be_whole_lines():
    with pytest.raises(DcgmiFormatError):
        parse_dcgmi_diag('garbage {"DCGM GPU Diagnostic": {}}')


# No complete genuine document of these layouts was found (see SOURCES.md); the documents below
# are minimal test inputs in the documented key layout, not samples of real output.
DCGM4 = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {
                        "name": "software",
                        "results": [
                            {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                            {
                                "entity_group": "GPU",
                                "entity_group_id": 1,
                                "entity_id": 1,
                                "status": "Fail",
                                "warnings": [
                                    {
                                        "error_category": 10,
                                        "error_id": 4,
                                        "error_severity": 2,
                                        "warning": "Detected 1 volatile double-bit ECC error(s) in GPU 1.",
                                    }
                                ],
                            },
                        ],
                        "test_summary": {"status": "Fail"},
                    }
                ],
            }
        ]
    },
    "metadata": {"Driver Version Detected": "550.54.15", "version": "4.1.1"},
}
DCGM3 = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "GPU Memory",
                        "results": [
                            {"gpu_ids": "0", "status": "Pass"},
                            {
                                "gpu_ids": "1",
                                "status": "Fail",
                                "warnings": [{"warning": "DBE", "error_id": 4}],
                            },
                        ],
                    }
                ],
            },
        ],
        "version": "3.3.5",
        "Driver Version Detected": "535.129.03",
    }
}


def test_both_diag_layouts_give_the_same_model():
    four, three = parse_dcgmi_diag(json.dumps(DCGM4)), parse_dcgmi_diag(json.dumps(DCGM3))
    assert (four.schema, four.version, four.driver_version) == ("dcgm4", "4.1.1", "550.54.15")
    assert (three.schema, three.version) == ("dcgm3", "3.3.5")
    for report in (four, three):
        (f,) = report.failed()
        assert f.gpu == 1 and f.error_ids == [4]
    assert three.results[0].gpu is None  # a system-wide result


def test_not_a_diag_document():
    with pytest.raises(DcgmiFormatError):
        parse_dcgmi_diag("{}")
    with pytest.raises(DcgmiFormatError):
        parse_dcgmi_diag("Error: unable to connect to host engine")


def test_health_document():
    doc = {
        "body": {
            "GPU": {
                "children": {
                    "3": {
                        "children": {
                            "Errors": {
                                "children": {
                                    "PCIe system": {
                                        "overflow": ["Detected XID 79 for GPU 3"],
                                        "value": "Failure",
                                    }
                                }
                            }
                        },
                        "value": "Failure",
                    }
                }
            },
            "Overall Health": {"value": "Failure"},
        },
        "header": ["Health Monitor Report"],
    }
    r = parse_dcgmi_health(json.dumps(doc))
    assert r.overall == "Failure" and r.gpu_status == {3: "Failure"}
    (i,) = r.incidents
    assert (i.gpu, i.system, i.status, i.message) == (
        3,
        "PCIe system",
        "Failure",
        "Detected XID 79 for GPU 3",
    )
    healthy = parse_dcgmi_health(json.dumps({"body": {"Overall Health": {"value": "Healthy"}}, "header": []}))
    assert healthy.overall == "Healthy" and healthy.incidents == []
