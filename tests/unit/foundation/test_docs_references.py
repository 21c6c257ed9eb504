"""Every pointer into the docs resolves: a `docs/<page>.md` named anywhere in the repository's code,
roles, tests and docs exists, and so does an anchor it names (`docs/runbook.md#fatal-xid`, as the
alert rules' runbook links do); a section it names (`docs/launch.md, "Resume rules"`) begins a
line of that page (a heading, or a paragraph that starts with it, bold or not); and every relative
Markdown link in README.md and docs/ reaches its file and anchor. So a page renamed, merged or cut
leaves no reader (or comment) pointing at nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".j2", ".toml", ".sh", ".cfg", ".txt", ".json"}
_PAGE = re.compile(r"\bdocs/(?P<page>[a-z0-9_/-]+\.md)")
_SECTION = re.compile(r"\bdocs/(?P<page>[a-z0-9_/-]+\.md)(?:, | \(|: )[\"“](?P<title>[^\"”\n]{3,100})[\"”]")
_ANCHORED = re.compile(r"\bdocs/(?P<page>[a-z0-9_/-]+\.md)#(?P<anchor>[a-z0-9-]+)")
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO / p for p in out.stdout.splitlines() if Path(p).suffix in _TEXT_SUFFIXES]


def _headings(page: Path) -> list[str]:
    in_fence = False
    found = []
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        m = None if in_fence else _HEADING.match(line)
        if m:
            found.append(m.group("title").strip())
    return found


def _leads(page: Path) -> list[str]:
    """The start of every line, lower case, with heading marks and bold stripped: where a section
    named in prose can begin."""
    return [line.lstrip("#* ").lower() for line in page.read_text(encoding="utf-8").splitlines()]


def _anchor(title: str) -> str:
    # GitHub's slug: lower case, punctuation dropped, spaces to hyphens
    slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", ""))
    return slug.replace(" ", "-")


def test_every_named_docs_page_and_section_exists() -> None:
    missing: list[str] = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(REPO)
        for m in _PAGE.finditer(text):
            if not (REPO / "docs" / m.group("page")).is_file():
                missing.append(f"{where}: docs/{m.group('page')} does not exist")
        for m in _ANCHORED.finditer(text):  # alert rules' runbook_url, dashboards' links
            page = REPO / "docs" / m.group("page")
            if page.is_file() and m.group("anchor") not in {_anchor(h) for h in _headings(page)}:
                missing.append(f"{where}: docs/{m.group('page')}#{m.group('anchor')}: no such heading")
        for m in _SECTION.finditer(text):
            page = REPO / "docs" / m.group("page")
            if not page.is_file():
                continue
            title = m.group("title").strip().rstrip(".,;:")
            if not any(lead.startswith(title.lower()) for lead in _leads(page)):
                missing.append(f'{where}: docs/{m.group("page")} has no section "{title}"')
    assert not missing, "\n".join(sorted(set(missing)))


def test_every_relative_markdown_link_resolves() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken: list[str] = []
    for page in pages:
        for m in _LINK.finditer(page.read_text(encoding="utf-8")):
            target = m.group("target")
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = page.relative_to(REPO)
            if not dest.exists():
                broken.append(f"{where}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in {_anchor(h) for h in _headings(dest)}:
                broken.append(f"{where}: {target}: no such heading")
    assert not broken, "\n".join(broken)
