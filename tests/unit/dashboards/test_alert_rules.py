"""The alert rules load in promtool and behave as their promtool unit tests say."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ALERTS = Path(__file__).resolve().parents[3] / "dashboards" / "alerts"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make test installs it)")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=ALERTS, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("rules", sorted(p.name for p in ALERTS.glob("*.rules.yml")))
def test_rules_pass_promtool_check(rules: str) -> None:
    result = _promtool("check", "rules", rules)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("tests", sorted(p.name for p in ALERTS.glob("*.test.yml")))
def test_rules_unit_tests(tests: str) -> None:
    result = _promtool("test", "rules", tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_or_severity() -> None:
    alerts = {
        rule["alert"]: rule
        for path in ALERTS.glob("*.rules.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    tested = {
        case["alertname"]
        for path in ALERTS.glob("*.test.yml")
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    untested = sorted(set(alerts) - tested - {"GpuHot", "InfinibandLinkDowned", "InfinibandRateBelowNdr"})
    assert not untested, f"alerts without a firing unit test: {untested}"
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"], name
