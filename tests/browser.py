"""Open a page in headless Chromium (Debian's): the DOM after its scripts ran, and a screenshot.
(tests/ is on sys.path through its conftest.py.)"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1300,1500",
         "--virtual-time-budget=5000", "--user-data-dir={profile}"]


def _argv(profile: Path) -> list[str]:
    assert CHROMIUM is not None, "chromium is not installed (make test installs it)"
    return [CHROMIUM, *(f.format(profile=profile) for f in FLAGS)]


def open_page(url: str, work: Path, screenshot: str | None = None) -> Page:
    """The page at `url` as Chromium rendered it; with `screenshot`, a PNG of it under `work`
    (its path printed, so a failed or passed run shows where to look)."""
    work.mkdir(parents=True, exist_ok=True)
    dom = subprocess.run([*_argv(work / "profile"), "--dump-dom", url], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    if screenshot:
        png = work / screenshot
        subprocess.run([*_argv(work / "profile"), f"--screenshot={png}", url], capture_output=True,
                       timeout=120, check=True)
        assert png.stat().st_size > 10_000, f"{png}: a blank page?"
        print(f"viewer screenshot: {png}")
    page = Page()
    page.feed(dom)
    return page


class Page(HTMLParser):
    """Every element's tag and attributes, and the text inside each element of a class."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, list[str]] = {}
        self._open: list[tuple[str, str]] = []  # (tag, class) of the open elements

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in {"br", "img", "input", "link", "meta"}:
            self._open.append((tag, a.get("class", "")))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        for _, cls in self._open:
            for c in cls.split():
                self.texts.setdefault(c, []).append(data)

    def find(self, tag: str, cls: str = "") -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and (not cls or cls in a.get("class", "").split())]

    def text(self, cls: str) -> str:
        return "".join(self.texts.get(cls, []))
