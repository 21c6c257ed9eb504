"""Every ```toml block in README.md and docs/*.md is valid TOML, and loads through the loader it
documents: an opsctl.toml example (its tables are opsctl.toml sections) through
``opsctl.config.parse_config``, a job config example (JobConfig's keys) through
``training.config.config_from_dict``. So an unknown section or key, or a bad value, fails here as it
would for the operator who copies it. Keys shown commented out (``# lustre_mount = "..."``) are
example settings too: they are loaded uncommented.

A block that is deliberately partial is skipped only when the last non-blank line before its fence
is ``<!-- toml: fragment -->`` (FRAGMENT_MARKER); use it sparingly.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import SECTIONS, ConfigError, parse_config
from training.config import ConfigError as JobConfigError
from training.config import JobConfig, config_from_dict

REPO = Path(__file__).resolve().parents[3]
FRAGMENT_MARKER = "<!-- toml: fragment -->"
JOB_KEYS = frozenset(f.name for f in dataclasses.fields(JobConfig))
_HEADER = re.compile(r"\s*\[([A-Za-z0-9_.-]+)\]")
_COMMENTED = re.compile(r"\s*#\s*([A-Za-z0-9_-]+\s*=.*)")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    text: str
    fragment: bool

    @property
    def where(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{path}:{self.line}"


def _closes(line: str) -> bool:
    # a closing fence has no info string (CommonMark), so "```toml" inside a fence is its text
    return line.strip().startswith("```") and not line.strip().strip("`")


def toml_blocks(path: Path) -> list[Block]:
    """The ```toml blocks of a Markdown file; fences of other languages are skipped whole."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("```"):
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j])), len(lines))
        if lines[i].strip() == "```toml":
            before = [s.strip() for s in lines[:i] if s.strip()]
            fragment = bool(before) and before[-1] == FRAGMENT_MARKER
            text = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
            blocks.append(Block(path, i + 1, text, fragment))
        i = end + 1
    return blocks


def with_commented_keys(text: str, data: dict[str, Any]) -> str:
    """``text`` with each commented-out ``key = value`` line uncommented, unless that key is already
    set in its table (an alternative value) or the line is prose that is not TOML."""
    seen: dict[str, set[str]] = {name: set(table) for name, table in data.items() if isinstance(table, dict)}
    seen[""] = {key for key, value in data.items() if not isinstance(value, dict)}
    table, out = "", []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            table = header.group(1)
        commented = _COMMENTED.fullmatch(line)
        if commented:
            try:
                (key,) = tomllib.loads(commented.group(1))
            except (tomllib.TOMLDecodeError, ValueError):
                key = ""
            if key and key not in seen.setdefault(table, set()):
                seen[table].add(key)
                line = commented.group(1)
        out.append(line)
    return "\n".join(out) + "\n"


def check_block(block: Block) -> str | None:
    """Why the block is wrong (naming its file and line), or None."""
    try:
        text = with_commented_keys(block.text, tomllib.loads(block.text))
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return f"{block.where}: invalid TOML (its line 1 is the one after the fence): {exc}"
    keys = set(data)
    try:
        if keys and keys <= set(SECTIONS):
            parse_config(text)
        elif keys and keys <= JOB_KEYS:
            config_from_dict(data)
        else:
            return (f"{block.where}: neither an opsctl.toml example (sections {sorted(SECTIONS)}) nor a "
                    f"job config (keys {sorted(JOB_KEYS)}): top-level {sorted(keys)}; if it is meant "
                    f"to be partial, put {FRAGMENT_MARKER} on the line before its fence")
    except (ConfigError, JobConfigError) as exc:
        return f"{block.where}: {exc}"
    return None


def _doc_blocks() -> list[Block]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [b for path in docs for b in toml_blocks(path)]


DOC_BLOCKS = _doc_blocks()


def test_the_docs_have_toml_blocks() -> None:
    # an extractor that silently finds nothing would pass every check below
    assert any(b.path.name == "health-checks.md" for b in DOC_BLOCKS)


@pytest.mark.parametrize("block", DOC_BLOCKS, ids=lambda b: b.where)
def test_doc_toml_block_loads(block: Block) -> None:
    if block.fragment:
        pytest.skip(f"marked {FRAGMENT_MARKER}")  # reported, so the exclusions stay visible
    problem = check_block(block)
    assert problem is None, problem


@pytest.mark.parametrize(("markdown", "expected"), [
    ("```toml\n[health]\nshadow = true\nshadow = false\n```\n", "doc.md:1: invalid TOML"),
    ("x\n\n```toml\n[health]\nkernel_log_retention = 86400\n```\n",
     "doc.md:3: opsctl.toml: unknown key health.kernel_log_retention"),
    ("```toml\n[health]\n# mount_timeout = 10.0   # seconds\n```\n", "unknown key health.mount_timeout"),
    ("```toml\n[remediator]\ninterval = 0.0\n```\n", "remediator.interval: must be between"),
    ("```toml\n[trainer]\nstepz = 3\n```\n", "trainer.stepz"),
    ("```toml\nfabric_pkey = \"0xffff\"\n```\n", "neither an opsctl.toml example"),
])
def test_check_block_names_the_problem(tmp_path: Path, markdown: str, expected: str) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(markdown)
    (block,) = toml_blocks(doc)
    problem = check_block(block)
    assert problem is not None and expected in problem, problem


def test_fragment_marker_and_other_fences(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- toml: fragment -->\n\n```toml\nkey = 1\n```\n"
                   "```text\n```toml\n```\n"
                   "```toml\n[health]\n# ssh_port = 2222\n# nextstate=RESUME is prose\n```\n")
    marked, plain = toml_blocks(doc)
    assert (marked.line, marked.fragment) == (3, True)
    assert (plain.line, plain.fragment) == (9, False)
    assert check_block(plain) is None
