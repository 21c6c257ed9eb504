"""The pictures in docs/pictures/ are drawn from Graphviz sources kept beside them (`make pictures`
renders each X.dot to X.svg). Without running Graphviz, these tests hold the committed SVGs to
their sources: every .dot has its .svg (and every .svg its .dot); the SVG shows exactly the label
lines its source writes (node, edge and cluster labels, compared after XML unescaping and
whitespace normalisation), and comes from the graph of that name; so a source edited without
rendering it again fails here. And each picture is shown somewhere: README.md or a page under
docs/ links to it."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PICTURES = REPO / "docs" / "pictures"
SOURCES = sorted(PICTURES.glob("*.dot"))

_LABEL_ATTRS = {"label", "xlabel", "headlabel", "taillabel"}
# one DOT token: a comment, a quoted string, an HTML string's opening, an ID or a punctuation mark
_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/|^\#[^\n]*)
      | "(?P<string>(?:[^"\\]|\\.)*)"
      | (?P<html><)
      | (?P<id>[A-Za-z_\x80-\uffff][\w\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))
      | (?P<punct>->|--|[^\s\w"])
    """,
    re.VERBOSE | re.DOTALL | re.MULTILINE,
)
# Graphviz's substitutions (node name, graph name...): a label written with them cannot be compared
_SUBSTITUTIONS = set("NGEHTL")


def _tokens(source: str) -> list[tuple[str, str]]:
    """The source's tokens as (kind, text), comments dropped; adjacent quoted strings joined by `+`
    are one string, as Graphviz reads them."""
    out: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(source):
        kind = m.lastgroup or ""
        if kind == "comment":
            continue
        text = m.group(kind)
        if kind == "string" and len(out) >= 2 and out[-1] == ("punct", "+") and out[-2][0] == "string":
            out.pop()
            out[-1] = ("string", out[-1][1] + text)
            continue
        out.append((kind, text))
    return out


def _label_lines(raw: str, where: str) -> list[str]:
    """The lines Graphviz draws for a quoted label: `\\n`, `\\l` and `\\r` break lines, `\\"` is a
    quote, `\\\\` a backslash, a backslash before a newline continues the line; entities are
    read as Graphviz reads them; whitespace is normalised and empty lines dropped."""
    lines: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            i += 2
            if nxt in "nlr":
                lines.append("".join(current))
                current = []
            elif nxt in _SUBSTITUTIONS:
                pytest.fail(f"{where}: the label uses Graphviz's \\{nxt}; write its text out to check it")
            elif nxt != "\n":
                current.append(nxt)
            continue
        current.append(ch)
        i += 1
    lines.append("".join(current))
    return [norm for line in lines if (norm := " ".join(html.unescape(line).split()))]


def source_labels(path: Path) -> tuple[str, set[str]]:
    """The graph's name and every label line written in a .dot source."""
    tokens = _tokens(path.read_text(encoding="utf-8"))
    kinds = [t[1].lower() for t in tokens[:3]]
    start = 1 if kinds and kinds[0] == "strict" else 0
    if len(tokens) <= start + 1 or kinds[start] not in ("graph", "digraph"):
        pytest.fail(f"{path.name}: does not begin with `digraph NAME {{` or `graph NAME {{`")
    name_kind, name = tokens[start + 1]
    if name_kind not in ("id", "string"):
        pytest.fail(f"{path.name}: give the graph a name (`digraph NAME {{`): its SVG is told by it")
    labels: set[str] = set()
    for i in range(len(tokens) - 2):
        (k1, attr), (k2, eq), (k3, value) = tokens[i : i + 3]
        if k1 != "id" or attr not in _LABEL_ATTRS or (k2, eq) != ("punct", "="):
            continue
        where = f"{path.name}: {attr}={value!r}"
        if k3 == "html":
            pytest.fail(f"{where}: an HTML label; write plain quoted labels so the test can read them")
        labels.update(_label_lines(value, where) if k3 == "string" else [value])
    return name, labels


def svg_texts(path: Path) -> tuple[str, set[str]]:
    """The graph's name (the title of its top group) and the text of every <text> element in an SVG
    Graphviz wrote, unescaped and whitespace-normalised."""
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    graph = root.find(f"{ns}g")
    title = graph.find(f"{ns}title") if graph is not None else None
    name = "".join(title.itertext()).strip() if title is not None else ""
    texts = {" ".join("".join(el.itertext()).split()) for el in root.iter(f"{ns}text")}
    return name, texts - {""}


def _link_targets(page: Path) -> set[Path]:
    """Where a Markdown page's links and <img src> point, resolved from the page."""
    text = page.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)", text) + re.findall(r"""src=["']([^"']+)["']""", text)
    out = set()
    for target in targets:
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path and "://" not in path:
            out.add((page.parent / path).resolve())
    return out


def test_pictures_have_sources_and_renders() -> None:
    assert SOURCES, f"no Graphviz sources in {PICTURES.relative_to(REPO)}"
    missing = [p.name for p in SOURCES if not p.with_suffix(".svg").is_file()]
    orphans = [p.name for p in sorted(PICTURES.glob("*.svg")) if not p.with_suffix(".dot").is_file()]
    assert not missing, f"sources without their SVG (run `make pictures`): {missing}"
    assert not orphans, f"SVGs without a source in docs/pictures (drawn from what?): {orphans}"


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_svg_shows_what_its_source_says(source: Path) -> None:
    svg = source.with_suffix(".svg")
    if not svg.is_file():
        pytest.fail(f"{svg.name} is missing: run `make pictures`")
    name, labels = source_labels(source)
    svg_name, texts = svg_texts(svg)
    assert labels, f"{source.name}: no labels found"
    assert svg_name == name, (
        f"{svg.name} was rendered from graph {svg_name!r}, {source.name} is graph {name!r}: "
        "run `make pictures`")
    stale = sorted(labels - texts)
    assert not stale, f"{source.name} says what {svg.name} does not show (run `make pictures`): {stale}"
    extra = sorted(texts - labels)
    assert not extra, (
        f"{svg.name} shows text its source no longer says (run `make pictures`; a node without a "
        f"label shows its name: give it one): {extra}")


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_picture_is_shown_in_the_docs(source: Path) -> None:
    svg = source.with_suffix(".svg").resolve()
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    shown = [p.relative_to(REPO).as_posix() for p in pages if p.is_file() and svg in _link_targets(p)]
    assert shown, (f"{svg.relative_to(REPO)} is shown nowhere: link it from README.md or a page in docs/, "
                   f"e.g. ![...](pictures/{svg.name}) in a docs/ page")
