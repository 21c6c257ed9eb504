"""``opsctl health``: one pass that collects evidence, judges it (``opsctl.checks``) and, with
``--remediate``, hands the reports to the one remediation pass (``opsctl.remediation.passes``);
``render`` is its rich table (kept apart so --json never imports rich)."""
