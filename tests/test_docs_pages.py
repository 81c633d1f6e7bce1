"""README.md is a landing page: short, and one click from every page of docs/; no link is dead."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from doc_pages import DOCS, PROJECT, README, doc_pages

MAX_README_LINES = 300
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens.

    Letters and digits of any script stay (``σ̂`` keeps its letter), ``-`` and ``_`` stay, every
    other character (backquotes, quotes, parentheses, dots, commas, "…") is dropped.
    """
    kept = []
    for char in heading.strip().lower():
        category = unicodedata.category(char)
        if char in "-_" or category[0] in "LN" or category == "Mn":
            kept.append(char)
        elif char == " ":
            kept.append("-")
    return "".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks), repeated ones numbered."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        anchor, n = github_anchor(heading), 1
        while anchor in found:
            anchor = f"{github_anchor(heading)}-{n}"
            n += 1
        found.add(anchor)
    return found


def test_anchor_rule_on_hand_written_headings() -> None:
    assert github_anchor("Reproducing the paper's tables and figures") == (
        "reproducing-the-papers-tables-and-figures"
    )
    assert github_anchor("The uplink model (`channel/`)") == "the-uplink-model-channel"
    assert github_anchor("Dirichlet α (`mnist1d_dirichlet`, 1,200 rounds)") == (
        "dirichlet-α-mnist1d_dirichlet-1200-rounds"
    )


def test_the_readme_is_a_short_landing_page_one_click_from_every_docs_page() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_README_LINES
    linked = {
        (README.parent / target.split("#")[0]).resolve()
        for target in LINK.findall(README.read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "#"))
    }
    pages = set(p.resolve() for p in DOCS.glob("*.md"))
    assert pages - linked == set()


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.name)
def test_every_relative_link_and_image_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    dead = []
    for target in LINK.findall(text) + IMAGE.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = page if not path else (page.parent / path).resolve()
        if not file.exists() or PROJECT not in file.parents:
            dead.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            dead.append(target)
    assert dead == []
