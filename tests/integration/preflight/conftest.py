from __future__ import annotations

import sys
from pathlib import Path

# Reused, not copied: the sshd-per-node harness of the health tests and the preflight samples.
_TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_TESTS / "integration" / "health"))
sys.path.insert(0, str(_TESTS / "unit" / "preflight"))
