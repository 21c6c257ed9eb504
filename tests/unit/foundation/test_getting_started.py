"""docs/getting-started.md keeps its shape: the steps a lab run takes are marked, in the guide's
order, each right before a command block (the lab tests run validate, converge and acceptance as
written: tests/integration/lab/conftest.py, test_lab_fabric.py)."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "getting-started.md"
STEPS = ["inventory", "validate", "converge", "acceptance", "shadow", "apply"]


def test_the_guide_marks_its_steps_in_order_each_before_a_command_block() -> None:
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    marker = re.compile(r"<!-- step: ([a-z-]+) -->$")
    marked = [(i, m.group(1)) for i, line in enumerate(lines) if (m := marker.match(line))]
    assert [name for _, name in marked] == STEPS
    for i, name in marked:
        assert lines[i + 1].startswith("```") and not lines[i + 2].startswith("```"), name


def test_the_converge_step_runs_site_yml_then_a_check_mode_run() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    block = text.split("<!-- step: converge -->", 1)[1].split("```")[1]
    assert [c.strip() for c in block.strip().splitlines()] == [
        "ansible-playbook site.yml", "ansible-playbook site.yml --check"]
