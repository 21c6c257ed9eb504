import json
import threading
from pathlib import Path

import pytest

from opsctl.lab import image
from opsctl.lab.config import LabConfig


@pytest.fixture
def fake_build(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[object]]:
    """Record debootstrap and download calls instead of running them; Debian lacks 'nvidia-*'."""
    calls: dict[str, list[object]] = {"bootstrap": [], "download": []}

    def bootstrap(cfg: LabConfig, target: Path, log: Path) -> None:
        (target / "usr/bin").mkdir(parents=True)
        (target / "usr/bin/python3").write_text("")
        calls["bootstrap"].append(target)

    def download(rootfs: Path, packages: list[str]) -> list[str]:
        calls["download"].append(list(packages))
        return [p for p in packages if p.startswith("nvidia-")]

    monkeypatch.setattr(image, "_bootstrap", bootstrap)
    monkeypatch.setattr(image, "_download", download)
    return calls


def test_first_call_builds_then_reuses_the_cache(tmp_path: Path, fake_build: dict[str, list[object]]) -> None:
    cfg = LabConfig(cache_dir=tmp_path)
    first = image.ensure_image(cfg, ["slurmd", "munge", "nvidia-x"])
    assert first.packages == ("munge", "slurmd") and first.unavailable == ("nvidia-x",)
    second = image.ensure_image(cfg, ["munge", "slurmd"])
    assert second.rootfs == first.rootfs
    assert len(fake_build["bootstrap"]) == 1
    assert fake_build["download"] == [["munge", "nvidia-x", "slurmd"]]


def test_a_new_role_package_tops_up_the_cache(tmp_path: Path, fake_build: dict[str, list[object]]) -> None:
    cfg = LabConfig(cache_dir=tmp_path)
    image.ensure_image(cfg, ["munge"])
    image.ensure_image(cfg, ["munge", "chrony"])
    assert fake_build["download"] == [["munge"], ["chrony", "munge"]]
    stamp = json.loads((image.image_dir(cfg) / "packages.json").read_text())
    assert stamp["requested"] == ["chrony", "munge"]
    assert stamp["download"] == image.DOWNLOAD_MODE


def test_an_old_stamp_without_the_download_mode_downloads_again(
    tmp_path: Path, fake_build: dict[str, list[object]]
) -> None:
    cfg = LabConfig(cache_dir=tmp_path)
    image.ensure_image(cfg, ["munge"])
    (image.image_dir(cfg) / "packages.json").write_text(json.dumps({"requested": ["munge"]}))
    image.ensure_image(cfg, ["munge"])
    assert len(fake_build["download"]) == 2


def test_a_second_builder_waits_for_the_first_and_reuses_its_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_build: dict[str, list[object]]
) -> None:
    """The bootstrap's `lab prepare` and a `lab up` beside it: one debootstrap, both get the image."""
    cfg = LabConfig(cache_dir=tmp_path)
    started, release = threading.Event(), threading.Event()
    recording_bootstrap = image._bootstrap

    def slow_bootstrap(cfg: LabConfig, target: Path, log: Path) -> None:
        started.set()
        assert release.wait(10)
        recording_bootstrap(cfg, target, log)

    monkeypatch.setattr(image, "_bootstrap", slow_bootstrap)
    results: list[image.BaseImage] = []
    first = threading.Thread(target=lambda: results.append(image.ensure_image(cfg, ["munge"])))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: results.append(image.ensure_image(cfg, ["munge"])))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "the second builder did not wait for the first"
    release.set()
    first.join(10)
    second.join(10)
    assert [r.packages for r in results] == [("munge",), ("munge",)]
    assert len(fake_build["bootstrap"]) == 1 and fake_build["download"] == [["munge"]]
