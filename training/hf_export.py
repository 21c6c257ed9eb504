"""A run's policy as a Hugging Face model directory (`opsctl runs export`).

Sources, all committed: the SFT model (`sft/final/`) and every RL policy version still on disk
(`weights/step_N/`: the newest `trainer.keep_weights` and those of the kept trainer checkpoints,
see trainer.checkpoint.prune_weights). Both are model directories already (training/weights.py
writes the trainer's versions); export loads the version into the run's architecture, so a run
published before that change (one file, the trainer's names) exports the same way.

The writer is the trainer's (training/weights.py, one process here): the release's tensor names
(fused MoE experts split back into `experts.<i>.{gate,up,down}_proj`), safetensors shards with an
index, config and tokenizer beside them. The directory is written aside and
renamed into place, then loaded again with `AutoModelForCausalLM.from_pretrained` and compared
tensor by tensor with what was exported.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training.fsutil import STABLE, is_committed, step_dirs
from training.rundir import RunDir


class ExportError(ValueError):
    """A request export cannot serve (no such step, bad output directory): nothing is written."""


@dataclass
class Exported:
    run_dir: str
    output: str
    source: str  # "sft" or "rl"
    step: int | None  # the RL policy version; None for SFT
    tensors: int
    files: list[str]


def rl_versions(run: RunDir) -> list[int]:
    return sorted(step_dirs(run.weights, STABLE))


def _source(run: RunDir, step: int | None, sft: bool) -> tuple[str, int | None, Path | None]:
    """(source, step, weights directory): the SFT model, RL version `step`, or by default the newest RL
    version (the SFT model when RL published none)."""
    versions = rl_versions(run)
    if sft or (step is None and not versions):
        if not is_committed(run.sft_final, STABLE):
            raise ExportError(f"{run.root} has no committed SFT model (sft/final) and no RL version")
        return "sft", None, None
    chosen = versions[-1] if step is None else step
    if chosen not in versions:
        listed = ", ".join(map(str, versions[-8:])) or "none"
        raise ExportError(f"{run.root} has no committed RL version {chosen} (committed: {listed})")
    return "rl", chosen, run.step(run.weights, chosen)


def _check_output(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty directory")


def export_run(run_dir: Path, output: Path, step: int | None = None, sft: bool = False) -> Exported:
    """Write the chosen policy of the run at `run_dir` to `output` as a model directory."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.weights import (
        WeightsError,
        copy_model_files,
        layout_for,
        load_trainer_state,
        model_type,
        write_shards,
    )

    run = RunDir(run_dir)
    if not run.config.is_file():
        raise ExportError(f"{run_dir} is not a run directory (no config.toml)")
    cfg = run.load_config()
    source, chosen, weights = _source(run, step, sft)
    _check_output(output)
    base = run.initial_model(cfg)  # architecture, tokenizer and (for SFT) the weights
    model: Any = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    if weights is not None:
        try:
            state = load_trainer_state(weights)
        except WeightsError as exc:
            raise ExportError(str(exc)) from None
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [m for m in missing if not m.endswith("rotary_emb.inv_freq")]:
            raise ExportError(f"{weights} does not match the run's model: missing={missing[:4]} "
                              f"unexpected={unexpected[:4]}")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        sd = model.state_dict()
        write_shards(tmp, sd, layout_for(model_type(base), sd), rank=0, world=1)
        copy_model_files(base, tmp)
        info = Exported(str(run_dir), str(output), source, chosen, 0, [])
        (tmp / "opsctl_export.json").write_text(json.dumps({**asdict(info), "run_id": cfg.run_id}, indent=1))
        info.tensors = verify(tmp, model)
        info.files = sorted(p.name for p in tmp.iterdir())
        if output.exists():
            output.rmdir()  # empty (checked above): replaced by the finished directory
        tmp.rename(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def verify(path: Path, model: Any) -> int:
    """Load the written directory as any user would and compare every tensor with `model`'s;
    returns how many were compared."""
    import torch
    from transformers import AutoModelForCausalLM

    loaded: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    want, got = model.state_dict(), loaded.state_dict()
    if set(want) != set(got):
        odd = sorted(set(want) ^ set(got))[:4]
        raise ExportError(f"{path}: loads with other tensors than exported: {odd}")
    for name, tensor in want.items():
        if not torch.equal(tensor, got[name]):
            raise ExportError(f"{path}: tensor {name} differs after loading")
    return len(want)
