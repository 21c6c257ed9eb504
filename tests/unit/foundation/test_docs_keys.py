"""Every configuration key the README and docs/*.md name in prose exists in the code: `` `[section]
key` `` (opsctl.toml or the job TOML) and `` `section.key` `` (the job TOML's dotted form, as `-o`
takes it). A renamed or removed key fails here instead of leaving an operator a key that the loader
rejects. TOML blocks are checked by test_docs_toml_examples.py; the generated reference is not
scanned (it is written from the code)."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from opsctl.config import SECTIONS, section_class
from training.config import JobConfig

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `[health] confirm_after`, `[health] shadow = true`, `[health] ssh_*`
BRACKETED = re.compile(r"`\[(?P<section>[a-z_]+)\] (?P<key>[a-z_]+\*?)[^`]*`")
# `orchestrator.async_level = k`; a file name such as `metrics.jsonl` is no key
DOTTED = re.compile(r"`(?P<section>[a-z_]+)\.(?P<key>[a-z_]+)(?: [^`]*)?`")
FILE_SUFFIXES = frozenset({"json", "jsonl", "safetensors", "yml", "yaml", "conf", "toml", "py", "md", "pt"})


def _job_sections() -> dict[str, type[typing.Any]]:
    hints = typing.get_type_hints(JobConfig)
    fields = dataclasses.fields(JobConfig)
    return {f.name: hints[f.name] for f in fields if dataclasses.is_dataclass(hints[f.name])}


def _keys(cls: type[typing.Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def known(section: str, key: str, *, job_only: bool = False) -> bool | None:
    """Whether `key` (a trailing * matches a prefix) is a key of `section`; None when `section` is
    no section at all."""
    classes = [] if job_only else [section_class(section)] if section in SECTIONS else []
    job = _job_sections()
    if section in job:
        classes.append(job[section])
    if not classes:
        return None
    names = set().union(*(_keys(c) for c in classes))
    if key.endswith("*"):
        return any(n.startswith(key[:-1]) for n in names)
    return key in names


def mentions(path: Path) -> list[tuple[int, str, str, bool]]:
    """(line, section, key, bracketed) for each key named in the page's prose (fences skipped)."""
    out: list[tuple[int, str, str, bool]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        out += [(number, m["section"], m["key"], True) for m in BRACKETED.finditer(line)]
        out += [(number, m["section"], m["key"], False) for m in DOTTED.finditer(line)
                if m["section"] in _job_sections() and m["key"] not in FILE_SUFFIXES]
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_key_named_in_the_docs_exists(page: Path) -> None:
    wrong = []
    for number, section, key, bracketed in mentions(page):
        found = known(section, key, job_only=not bracketed)
        if found is None:
            wrong.append(f"{page.name}:{number}: [{section}] is no opsctl.toml or job TOML section")
        elif not found:
            wrong.append(f"{page.name}:{number}: [{section}] has no key {key!r}")
    assert not wrong, "\n".join(wrong)


def test_the_scan_finds_keys_and_tells_a_missing_one() -> None:
    assert known("health", "confirm_after") is True
    assert known("health", "ssh_*") is True
    assert known("metrics", "host", job_only=True) is True
    assert known("health", "confirm_afterwards") is False
    assert known("orchestrator", "async_levels", job_only=True) is False
    assert known("nosuch", "key") is None
    assert sum(len(mentions(p)) for p in PAGES) > 40  # the docs do name keys: the pattern still matches
