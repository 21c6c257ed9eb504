"""Every `opsctl ...` command line in README.md and docs/ names a real command and only flags that
command has: a renamed or removed subcommand or flag fails here, not at an operator's prompt."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from opsctl.cli import cli

REPO = Path(__file__).resolve().parents[3]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_CALL = re.compile(r"(?<![\w/.:-])opsctl(?P<rest>(?: +[^\s`|#;&)]+)*)")
_FLAG = re.compile(r"^\[?(?P<flag>--[a-z][a-z0-9-]*)")
_ROOT_FLAGS = {"--config", "--version", "--help"}


def _code(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the code in a page: fenced blocks' lines and inline `code` spans."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append((number, re.split(r"\s#", line, maxsplit=1)[0]))  # not a shell comment
        else:
            out += [(number, span) for span in re.findall(r"`([^`]+)`", line)]
    return out


def _calls() -> list[tuple[str, str]]:
    """(where, the words after `opsctl`) for every opsctl command line in the pages' code."""
    found = []
    for page in PAGES:
        for number, code in _code(page.read_text(encoding="utf-8")):
            for m in _CALL.finditer(code):
                if m.group("rest").strip():
                    found.append((f"{page.relative_to(REPO)}:{number}", m.group("rest")))
    return found


def _resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The deepest command the leading words name, the path to it, and the words left."""
    command: click.Command = cli
    path: list[str] = []
    ctx = click.Context(cli)
    rest = list(words)
    while rest and isinstance(command, click.Group):
        word = rest[0]
        if word.startswith("-"):
            if word in _ROOT_FLAGS and command is cli:
                rest = rest[2:] if word == "--config" else rest[1:]
                continue
            break
        sub = command.get_command(ctx, word)
        if sub is None:
            break
        command, path, rest = sub, [*path, word], rest[1:]
    return command, path, rest


def _flags(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
    return names


CALLS = _calls()


def test_the_docs_show_opsctl_commands() -> None:
    assert len(CALLS) > 50


@pytest.mark.parametrize(("where", "rest"), CALLS, ids=[w for w, _ in CALLS])
def test_a_documented_command_line_names_a_real_command_and_its_flags(where: str, rest: str) -> None:
    words = rest.split()
    command, path, left = _resolve(words)
    if isinstance(command, click.Group) and left and re.fullmatch(r"[a-z][a-z-]*", left[0]):
        pytest.fail(f"{where}: `opsctl {rest.strip()}`: `opsctl {' '.join(path)}` has no command {left[0]!r}")
    known = _flags(command) | (_ROOT_FLAGS if command is cli else set())
    unknown = sorted({m.group("flag") for w in left if (m := _FLAG.match(w))} - known)
    assert not unknown, f"{where}: `opsctl {' '.join(path)}` has no {', '.join(unknown)}"
