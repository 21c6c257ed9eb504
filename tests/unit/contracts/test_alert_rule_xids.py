"""The GpuFatalXid alert fires for exactly the XIDs opsctl's checks drain for: the shipped XID
catalogue's classes reset_gpu, reboot and replace, and any XID the catalogue does not know
(thresholds.toml's default_class). The rule's matcher is read from the committed rules file and
applied as Prometheus applies it (a fully anchored RE2 match)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import yaml
from upstream_contract import REPO

from opsctl.checks import load_thresholds

RULES = REPO / "dashboards" / "alerts" / "gpu-node-health.rules.yml"
FATAL = {"reset_gpu", "reboot", "replace"}


def fires() -> Callable[[int], bool]:
    (rule,) = [
        r
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GpuFatalXid"
    ]
    (matcher,) = re.findall(r'xid(=~|!~)"([^"]*)"', rule["expr"])
    op, pattern = matcher
    return lambda xid: bool(re.fullmatch(pattern, str(xid))) == (op == "=~")


def test_the_rule_fires_for_every_xid_the_checks_drain_for_and_no_other():
    th, rule = load_thresholds(), fires()
    wrong = [x for x in range(1, 256) if rule(x) != (th.xid_class(x) in FATAL)]
    assert wrong == [], (
        f"GpuFatalXid disagrees with the checks on XIDs {wrong} (run python dashboards/generate.py)"
    )


@pytest.mark.parametrize(
    ("xid", "drains"),
    [
        (63, False),
        (92, False),
        (69, False),
        (94, False),
        (46, True),
        (154, True),
        (158, True),
        (79, True),
        (250, True),
    ],
)
def test_the_cases_the_old_hand_list_got_wrong(xid: int, drains: bool) -> None:
    assert fires()(xid) is drains
