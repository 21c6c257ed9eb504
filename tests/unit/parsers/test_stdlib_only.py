"""The parsers ship to managed hosts as Ansible module_utils: standard library only, no siblings."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import opsctl.parsers

PARSERS = Path(opsctl.parsers.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add((node.module or "").split(".")[0])
    return names


def test_every_parser_imports_only_the_standard_library():
    modules = sorted(PARSERS.glob("*.py"))
    assert len(modules) >= 4
    for path in modules:
        bad = {n for n in _imports(path) if n not in sys.stdlib_module_names}
        assert not bad, f"{path.name} imports non-stdlib {bad}"
