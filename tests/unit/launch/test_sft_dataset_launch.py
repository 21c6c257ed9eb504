"""Chat SFT datasets at launch (opsctl/launch/datasets.py): a bad dataset fails `opsctl launch` with one
line naming the file and line, exit 2, before anything starts; a good one is recorded by absolute
path; on Slurm the SFT step then runs as the trainer's ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_unit_helpers import DEMO, ROOT, partition

from opsctl.cli import main
from opsctl.launch.settings import LaunchSection
from opsctl.launch.slurm import plan_layout
from training.config import load_config

DATASET = ROOT / "tests" / "fixtures" / "chat" / "arith-chat.jsonl"


def opsctl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_a_bad_line_fails_the_launch_naming_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "chat.jsonl"
    bad.write_text(DATASET.read_text().splitlines()[0] + "\n" + '{"messages": [{"role": "user"}]}\n')
    code, _, err = opsctl(capsys, "launch", "rl-run", "--local", "--dry-run", "--output", str(tmp_path / "r"),
                          "-o", f'sft.dataset="{bad}"')
    assert code == 2
    line = f"opsctl: error: sft.dataset: {bad}:2: no assistant message, nothing to train"
    assert err.strip().splitlines() == [line]
    assert not (tmp_path / "r").exists()


def test_a_good_dataset_is_recorded_by_absolute_path(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATASET.parent)
    code, out, _ = opsctl(capsys, "launch", "rl-run", "--local", "--dry-run", "--output", str(tmp_path / "r"),
                          "-o", 'sft.dataset="arith-chat.jsonl"')
    assert code == 0
    assert f'dataset = "{DATASET}"' in out


def test_slurm_runs_chat_sft_as_the_trainer_ranks(production: LaunchSection) -> None:
    def script(*overrides: str) -> str:
        cfg = load_config(DEMO, list(overrides))
        return plan_layout(production, cfg, partition(64), set(), {}, run_id="r1",
                           run_dir=Path("/shared/runs/r1")).script

    chat = script(f'sft.dataset="{DATASET}"')
    sft = chat[chat.index("SFT_PID=$!") - 400 : chat.index("SFT_PID=$!")]
    assert '--ntasks="$TRAINER_WORLD" --ntasks-per-node="$TASKS_PER_NODE"' in sft
    assert "export LOCAL_RANK=$SLURM_LOCALID" in sft and "sft-%t.log" in sft
    plain = script()
    sft = plain[plain.index("SFT_PID=$!") - 300 : plain.index("SFT_PID=$!")]
    assert "--ntasks=1 " in sft and "TRAINER_WORLD" not in sft
