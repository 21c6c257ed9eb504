"""The hand-written docs stay within the bound the docs issue set: README plus docs/*.md (the
generated docs/reference/ not counted) at most half of the 38,961 words they had on 2026-12-05,
counted as `wc -w` counts. A page that grows has another say less."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BOUND = 19_480


def test_readme_and_docs_stay_within_the_word_bound() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    counts = {p.name: len(p.read_text(encoding="utf-8").split()) for p in pages}
    total = sum(counts.values())
    largest = ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
    assert total <= BOUND, f"{total} words in README.md and docs/*.md, bound {BOUND} (largest: {largest})"
