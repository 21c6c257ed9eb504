"""`opsctl sim inject|heal` through the real entry point (no daemons: the cluster is not up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsctl.cli import main
from opsctl.hwsim.state import load, state_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def test_inject_then_heal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "sim", "inject", "gpu-002", "xid=79,gpu=3", "--state-dir", str(tmp_path), "--json"
    )
    assert code == 0
    report = json.loads(out)
    assert report["xids"] == [{"gpu": 3, "xid": 79}] and report["dry_run"] is False
    path = state_path(tmp_path / "hwsim", "gpu-002")
    assert load(path).gpu(3).last_xid == 79
    code, out, _ = _run(capsys, "sim", "heal", "gpu-002", "--state-dir", str(tmp_path))
    assert code == 0 and "healed gpu-002" in out
    assert not load(path).xids


def test_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "sim", "inject", "gpu-001", "ib_down=mlx5_2", "--dry-run", "--state-dir", str(tmp_path)
    )
    assert code == 0 and out.startswith("would inject ib_down=mlx5_2 into gpu-001")
    assert not (tmp_path / "hwsim").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gpu-001", "bogus"], "unknown fault 'bogus'"),
        (["gpu-777", "xid=79"], "unknown sim node 'gpu-777'"),
        (["gpu-001", "xid=79,gpu=12"], "no GPU 12"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = _run(capsys, "sim", "inject", *argv, "--state-dir", str(tmp_path))
    assert code == 2
    assert err.startswith("opsctl: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "hwsim").exists()  # nothing half-applied
