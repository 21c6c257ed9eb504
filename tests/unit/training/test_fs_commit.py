from pathlib import Path

import pytest

from training.fsutil import COMMITTED, STABLE, latest_step, publish_dir, remove_uncommitted, step_dirs


def test_publish_is_atomic_and_marked(tmp_path: Path) -> None:
    def fill(d: Path) -> None:
        (d / "model.bin").write_bytes(b"x" * 10)

    out = publish_dir(tmp_path / "weights" / "step_1", fill, STABLE, {"version": 1})
    assert (out / STABLE).is_file() and (out / "model.bin").read_bytes() == b"x" * 10
    assert latest_step(tmp_path / "weights") == 1
    with pytest.raises(FileExistsError):
        publish_dir(out, fill)


def test_a_failed_writer_leaves_nothing(tmp_path: Path) -> None:
    def boom(d: Path) -> None:
        (d / "part").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        publish_dir(tmp_path / "w" / "step_2", boom)
    assert list((tmp_path / "w").iterdir()) == []


def test_unmarked_dirs_are_ignored_and_cleaned(tmp_path: Path) -> None:
    parent = tmp_path / "ckpt"
    publish_dir(parent / "step_5", lambda d: None, COMMITTED)
    (parent / "step_9").mkdir()  # renamed into place, but the marker was never written
    (parent / ".tmp-step_10-abcd").mkdir()
    assert set(step_dirs(parent, COMMITTED)) == {5}
    remove_uncommitted(parent, COMMITTED)
    assert sorted(p.name for p in parent.iterdir()) == ["step_5"]
    # A crashed writer's unmarked step dir is replaced by the next publish.
    (parent / "step_9").mkdir()
    publish_dir(parent / "step_9", lambda d: (d / "f").write_text("ok"), COMMITTED)
    assert (parent / "step_9" / "f").read_text() == "ok"
