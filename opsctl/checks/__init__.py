"""Health checks: pure functions from collected evidence to verdicts."""

from opsctl.checks.model import Status, Verdict, worst
from opsctl.checks.runner import NodeReport, judge, judge_node
from opsctl.checks.thresholds import Thresholds, load_thresholds

__all__ = ["NodeReport", "Status", "Thresholds", "Verdict", "judge", "judge_node", "load_thresholds", "worst"]
