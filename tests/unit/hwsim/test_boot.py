from pathlib import Path

import pytest

from opsctl.hwsim import boot
from opsctl.hwsim.faults import apply_fault
from opsctl.hwsim.render_dcgm import incidents
from opsctl.hwsim.state import load, make_node, save


def test_a_boot_clears_what_a_reboot_clears_keeps_damage_and_records_no_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpu-003.json"
    state = make_node("gpu-003")
    apply_fault(state, "xid=79,gpu=3")
    apply_fault(state, "row_remap_failure,gpu=1")
    save(state, path)
    before = load(path)

    assert boot.main(["--state", str(path)]) == 0
    after = load(path)
    assert after.boot_id != before.boot_id and after.boot_time >= before.boot_time
    assert after.xids == [] and after.gpus[3].last_xid == 0
    assert after.faults == before.faults  # a boot is not a fault: `lab inject --json` lists the same
    assert [(i.system, i.gpu) for i in incidents(after)] == [("Memory system", 1)]  # the failed remap stays
    assert capsys.readouterr().out == f"hwsim boot: gpu-003 booted (boot id {after.boot_id})\n"


def test_an_unreadable_state_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert boot.main(["--state", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwsim boot: cannot read ") and err.count("\n") == 1
