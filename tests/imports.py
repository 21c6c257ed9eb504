"""What a fresh interpreter has imported after running some code: the import-weight tests' probe
(the CLI's light commands, the orchestrator's start). (tests/ is on sys.path through its conftest.py.)"""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(code: str) -> set[str]:
    """Run CODE in a new interpreter (this one's, so the venv's packages) and return sys.modules."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    argv = [sys.executable, "-c", probe]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))
