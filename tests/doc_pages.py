"""The user documentation: README.md and the pages of ``docs/`` it links to, as the tests read them.

Every command, snippet and table the tests check is looked for in all of these pages, so a
section can move between pages without its checks going away.
"""

from __future__ import annotations

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
README = PROJECT / "README.md"
DOCS = PROJECT / "docs"


def doc_pages() -> list[Path]:
    """README.md first, then every Markdown page of ``docs/`` in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def doc_text() -> str:
    """All pages, one after the other (each ends with a newline)."""
    return "".join(page.read_text(encoding="utf-8").rstrip("\n") + "\n\n" for page in doc_pages())
