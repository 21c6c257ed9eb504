"""Parsers for ``dcgmi diag -j`` (DCGM 3.x and 4.x layouts) and ``dcgmi health -c -j``.

``dcgmi diag -j``:

- DCGM 3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids" (or "gpu_id"), "status", "warnings": [{"warning", "error_id"}], "info"}]
  }]}], "version", "Driver Version Detected"}}``; a result without GPU ids covers the whole system.
- DCGM 4.x: ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"entity_group", "entity_group_id", "entity_id", "status", "warnings": [{"warning",
  "error_id", "error_category", "error_severity"}], "info": [...]}], "test_summary": {"status",
  "warnings"}}]}]}, "entity_groups": [...], "metadata": {"version", "Driver Version Detected"}}``
  (DCGM's own schema: tests/fixtures/real-world/dcgm_diag_schema.dcgm4.6.0.json).
- Either version, when the diagnostic cannot run (DCGM paused, NVVS killed or timed out, an
  unsupported driver): ``{"<name as above>": {"version", "runtime_error": "Error: ..."}}``.

``dcgmi health -c -j``: ``{"body": {"GPU": {"children": {"<id>": {"children": {"Errors":
{"children": {"<system>": {"value", "overflow": [...]}}}}, "value"}}}, "Overall Health": {"value"}},
"header": [...]}`` where values are Healthy, Warning or Failure.

Quirks seen in genuine output (DCGM 3.1.0, kept in DCGM's own tests): text such as a ``WARNING:``
line can precede the document on stdout, ``tests`` arrays can hold ``null`` entries between the
test objects, and ``gpu_ids`` is a string list (``"0,1,2"``) or a bare integer.

Standard library only: this file is also an Ansible module_util.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


class DcgmiFormatError(ValueError):
    """The text is not a dcgmi JSON document of a known layout."""


@dataclass
class DiagResult:
    test: str
    category: str
    status: str  # Pass, Fail, Warn, Skip, Not Run
    gpu: int | None  # None: the result is for the whole system
    warnings: list[str] = field(default_factory=list)
    error_ids: list[int] = field(default_factory=list)


@dataclass
class DiagReport:
    schema: str  # "dcgm3" or "dcgm4"
    version: str = ""
    driver_version: str = ""
    results: list[DiagResult] = field(default_factory=list)
    # DCGM 4: a test's summary that fails while none of its entity results does (an error tied to
    # no GPU, reported there only), as a whole-system result
    summary_failures: list[DiagResult] = field(default_factory=list)
    runtime_error: str = ""  # the diagnostic could not run (dcgmi exits non-zero)

    def failed(self) -> list[DiagResult]:
        return [r for r in self.results if r.status.lower() == "fail"] + self.summary_failures

    def not_completed(self) -> str:
        """Why this document is no evidence either way ("" when it is): the diagnostic could not
        run, or ran no test. It must never read as passed. (A document with a failure is
        evidence: the two never come together, a runtime_error document has no results.)"""
        if self.runtime_error:
            return f"could not run: {self.runtime_error}"
        if not self.results and not self.summary_failures:
            return "no test results"
        return ""


def _loads(text: str) -> Any:
    # dcgmi may print warnings before the document: start at the first line that opens it.
    start = text.find("{")
    if start > 0:
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].strip() == "":
            text = text[start:]
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DcgmiFormatError(f"not JSON: {exc}") from None


def _warnings(entry: dict[str, Any]) -> tuple[list[str], list[int]]:
    texts: list[str] = []
    ids: list[int] = []
    raw = entry.get("warnings") or []
    if isinstance(raw, dict):
        raw = [raw]
    for w in raw:
        if isinstance(w, dict):
            texts.append(str(w.get("warning", "")))
            if isinstance(w.get("error_id"), int):
                ids.append(w["error_id"])
        else:
            texts.append(str(w))
    return texts, ids


def parse_diag_test(test: dict[str, Any], category: str = "") -> list[DiagResult]:
    """Results of one test object (either layout)."""
    out: list[DiagResult] = []
    name = str(test.get("name", ""))
    for entry in test.get("results") or []:
        if not isinstance(entry, dict):
            continue
        texts, ids = _warnings(entry)
        status = str(entry.get("status", ""))
        gpus: list[int | None]
        if "entity_id" in entry:  # DCGM 4: one entity per result
            if str(entry.get("entity_group", "GPU")) != "GPU":
                continue
            gpus = [int(entry["entity_id"])]
        elif "gpu_ids" in entry or "gpu_id" in entry:  # DCGM 3: "0" or "0,1,2"
            raw = str(entry.get("gpu_ids", entry.get("gpu_id", "")))
            gpus = [int(x) for x in raw.replace(" ", "").split(",") if x.isdigit()] or [None]
        else:
            gpus = [None]
        out.extend(DiagResult(name, category, status, g, texts, ids) for g in gpus)
    return out


def _summary_failure(test: dict[str, Any], results: list[DiagResult], category: str) -> list[DiagResult]:
    """DCGM 4 lists every error of a test in its ``test_summary``, and an error tied to no entity
    only there: a failing summary counts when no entity result of the test already fails."""
    summary = test.get("test_summary")
    if not isinstance(summary, dict) or str(summary.get("status", "")).lower() != "fail":
        return []
    if any(r.status.lower() == "fail" for r in results):
        return []
    texts, ids = _warnings(summary)
    return [DiagResult(str(test.get("name", "")), category, str(summary["status"]), None, texts, ids)]


def parse_dcgmi_diag(text: str) -> DiagReport:
    doc = _loads(text)
    if not isinstance(doc, dict):
        raise DcgmiFormatError("dcgmi diag -j: top level is not an object")
    if "DCGM Diagnostic" in doc:
        body, schema = doc["DCGM Diagnostic"], "dcgm4"
        meta = doc.get("metadata") or body  # a runtime_error document keeps its version in the body
    elif "DCGM GPU Diagnostic" in doc:
        body, schema = doc["DCGM GPU Diagnostic"], "dcgm3"
        meta = body
    else:
        raise DcgmiFormatError(
            "dcgmi diag -j: neither 'DCGM Diagnostic' (4.x) nor 'DCGM GPU Diagnostic' (3.x)"
        )
    if not isinstance(body, dict):
        raise DcgmiFormatError(f"dcgmi diag -j: the document's body is not an object ({schema})")
    report = DiagReport(
        schema=schema,
        version=str(meta.get("version", "")),
        driver_version=str(meta.get("Driver Version Detected", "")),
        runtime_error=str(body.get("runtime_error") or "").strip(),
    )
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        category = str(cat.get("category", ""))
        for test in cat.get("tests") or []:
            if isinstance(test, dict):  # genuine 3.x output has null entries between tests
                results = parse_diag_test(test, category)
                report.results.extend(results)
                report.summary_failures.extend(_summary_failure(test, results, category))
    return report


@dataclass
class HealthIncident:
    gpu: int
    system: str  # "Memory system", "PCIe system", "NVLINK system", ...
    status: str  # Warning or Failure
    message: str


@dataclass
class HealthReport:
    overall: str = ""  # Healthy, Warning, Failure
    gpu_status: dict[int, str] = field(default_factory=dict)
    incidents: list[HealthIncident] = field(default_factory=list)


def parse_dcgmi_health(text: str) -> HealthReport:
    doc = _loads(text)
    body = doc.get("body") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise DcgmiFormatError("dcgmi health -c -j: no 'body' object")
    report = HealthReport(overall=str((body.get("Overall Health") or {}).get("value", "")))
    gpus = ((body.get("GPU") or {}).get("children")) or {}
    for gid, node in gpus.items():
        if not str(gid).isdigit():
            continue
        report.gpu_status[int(gid)] = str(node.get("value", ""))
        errors = (((node.get("children") or {}).get("Errors") or {}).get("children")) or {}
        for system, detail in errors.items():
            overflow = detail.get("overflow") or []
            message = " ".join(str(x) for x in overflow) if isinstance(overflow, list) else str(overflow)
            report.incidents.append(HealthIncident(int(gid), system, str(detail.get("value", "")), message))
    return report
