"""A run's tokenizer, loaded without the model code: the orchestrator tokenizes and builds no model,
and importing transformers' model classes (torch's compiler and distributed tensor modules with
them) costs each process a second and a half of CPU at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_tokenizer(path: str | Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
