from __future__ import annotations

import sys
from pathlib import Path

# promlab.py / sshlab.py sit next to this file; make them importable without a package
sys.path.insert(0, str(Path(__file__).parent))
