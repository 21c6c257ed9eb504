"""What each job process imports at start-up: every process of every attempt pays for it, and
transformers' model classes bring torch's compiler and distributed tensor modules (a second and a
half of CPU). The orchestrator tokenizes and builds no model, so it must not load them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MODEL_CODE = ["training.model", "training.varlen", "transformers.modeling_utils"]


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    argv = [sys.executable, "-c", probe]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_orchestrator_loads_no_model_code(tiny_model_dir: Path) -> None:
    loaded = _modules_after(
        "import training.orchestrator.__main__\n"
        "from training.tokenizer import load_tokenizer\n"
        f"load_tokenizer({str(tiny_model_dir)!r})('12+3=')"
    )
    assert "training.orchestrator.batch" in loaded  # the probe imported what it names
    assert not [m for m in MODEL_CODE if m in loaded]


def test_the_trainer_does() -> None:
    # the check above can fail: the same probe sees the model code where it is used
    loaded = _modules_after("import training.trainer.__main__")
    assert [m for m in MODEL_CODE if m in loaded] == MODEL_CODE
