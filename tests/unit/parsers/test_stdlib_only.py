"""The parsers ship to managed hosts as Ansible module_utils: standard library only. A parser may use
a sibling only through a relative import (``from .cpuinfo import ...``), which resolves both as
``opsctl.parsers.*`` and as ``ansible.module_utils.*`` (Ansible ships the sibling along); an absolute
``opsctl...`` import would not exist on a managed host."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import opsctl.parsers

PARSERS = Path(opsctl.parsers.__file__).parent


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(top-level names imported absolutely, sibling modules imported relatively)."""
    names: set[str] = set()
    siblings: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level == 1 and node.module, f"{path.name}: import from outside the parsers"
                siblings.add(node.module.split(".")[0])
            else:
                names.add((node.module or "").split(".")[0])
    return names, siblings


def test_every_parser_imports_only_the_standard_library_and_its_siblings():
    modules = sorted(PARSERS.glob("*.py"))
    assert len(modules) >= 4
    for path in modules:
        names, siblings = _imports(path)
        bad = {n for n in names if n not in sys.stdlib_module_names}
        assert not bad, f"{path.name} imports non-stdlib {bad}"
        missing = {s for s in siblings if not (PARSERS / f"{s}.py").is_file()}
        assert not missing, f"{path.name} imports siblings that do not exist: {missing}"


def test_the_checker_refuses_what_a_managed_host_lacks(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from opsctl.parsers import ib_sysfs\nfrom .nowhere import x\n")
    names, siblings = _imports(bad)
    assert "opsctl" not in sys.stdlib_module_names and "opsctl" in names
    assert siblings == {"nowhere"} and not (PARSERS / "nowhere.py").is_file()
