"""The job's own data, checked where `opsctl launch` runs, before anything starts or is submitted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opsctl.errors import ConfigError


def check_sft_dataset(cfg: Any) -> None:
    """Read the whole chat dataset (a bad line fails the launch with its line number, not the job an
    hour later) and make its path absolute: the job's processes run in another directory."""
    if not (cfg.sft.enabled and cfg.sft.dataset):
        return
    from training.chat import ChatDataError, load_dataset

    path = Path(cfg.sft.dataset).resolve()
    try:
        load_dataset(path)
    except ChatDataError as exc:
        raise ConfigError(f"sft.dataset: {exc}") from None
    cfg.sft.dataset = str(path)
