#!/usr/bin/python
# Copyright: opsctl contributors
# Apache License 2.0 (see the repository's pyproject.toml)
"""Ansible module: run ``dcgmi diag -r N -j`` and fail on any failed test, naming it."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dcgmi_json import DcgmiFormatError, DiagReport, parse_dcgmi_diag

DOCUMENTATION = r"""
---
module: dcgm_diag
short_description: Run the DCGM diagnostic on a node and fail on any failed test
description:
  - Runs C(dcgmi diag -r LEVEL -j) and reads its JSON (DCGM 3.x and 4.x layouts) with the parser
    opsctl uses (shipped as a module_util).
  - Fails when a test failed (naming test, GPU and warning; a failure DCGM 4 reports only in a
    test's summary included), when the diagnostic could not run (dcgmi's C(runtime_error)) or ran
    no test, when dcgmi fails without a result document, or when the output is not a diagnostic
    document.
version_added: "0.1.0"
author: opsctl contributors
options:
  level:
    description: Diagnostic level (1 quick, 2 medium, 3 long, 4 extended).
    type: int
    default: 1
    choices: [1, 2, 3, 4]
  dcgmi:
    description: The dcgmi executable.
    type: str
    default: dcgmi
notes:
  - Changes nothing on the node; in check mode it still runs, as it only reads.
"""

RETURN = r"""
results:
  description: One entry per test and GPU (test, category, status, gpu, warnings).
  type: list
  returned: always
failed_tests:
  description: The results whose status is Fail.
  type: list
  returned: always
"""


def summarize(report: DiagReport) -> tuple[list[dict[str, Any]], list[str]]:
    rows = [
        {"test": r.test, "category": r.category, "status": r.status, "gpu": r.gpu, "warnings": r.warnings}
        for r in report.results
    ]
    failures = [
        f"{r.test}{'' if r.gpu is None else f' (GPU {r.gpu})'}: {'; '.join(r.warnings) or r.status}"
        for r in report.failed()
    ]
    return rows, failures


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "level": {"type": "int", "default": 1, "choices": [1, 2, 3, 4]},
            "dcgmi": {"type": "str", "default": "dcgmi"},
        },
        supports_check_mode=True,
    )
    argv = [module.params["dcgmi"], "diag", "-r", str(module.params["level"]), "-j"]
    rc, out, err = module.run_command(argv)
    try:
        report = parse_dcgmi_diag(out)
    except (DcgmiFormatError, ValueError) as exc:
        detail = (err or out).strip().splitlines()
        module.fail_json(
            msg=f"dcgmi diag -r {module.params['level']}: exit {rc}, no diagnostic document ({exc})"
            + (f": {detail[-1]}" if detail else ""),
            rc=rc,
        )
    rows, failures = summarize(report)
    if failures:
        module.fail_json(
            msg=f"dcgmi diag -r {module.params['level']} failed: " + " | ".join(failures),
            results=rows,
            failed_tests=failures,
            rc=rc,
        )
    why = report.not_completed()
    if why:  # the diagnostic could not run, or ran nothing: no evidence the node is healthy
        level = module.params["level"]
        module.fail_json(msg=f"dcgmi diag -r {level} {why}", results=rows, failed_tests=[], rc=rc)
    module.exit_json(changed=False, results=rows, failed_tests=[], rc=rc)


if __name__ == "__main__":
    main()
