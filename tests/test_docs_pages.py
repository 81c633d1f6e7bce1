"""README.md is a landing page: short, and one click from every page of docs/; no link is dead.

Each command block of docs/ says what it costs here, or why it was not timed: in the paragraph
before, the block's comments or the paragraph after, a measured time ("here"), an estimate
("estimated") or why not ("not timed", ...); over five minutes, **(long)** too.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

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


#: a line a user runs: the project's tools, make targets, the test-harness sweeps
COMMAND = re.compile(r"^(?:PYTHONPATH=\S+ )?(?:\.venv/bin/(?:fedcgd|python|flwr) |make |flwr run )")
BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```\n", flags=re.S | re.M)
TIME = re.compile(r"\b(\d+(?:\.\d+)?)(?:[–-](\d+(?:\.\d+)?))? ?(s|min|h|hours)\b")
UNTIMED = re.compile(r"not timed|not run here|could not be run here|cannot run here")
LONG_S = 5 * 60


def seconds(match: re.Match[str]) -> float:
    """The larger end of a time or a range ("13-16 min"), in seconds."""
    value = float(match.group(2) or match.group(1))
    return value * {"s": 1, "min": 60, "h": 3600, "hours": 3600}[match.group(3)]


def command_blocks() -> list[Any]:
    """(page, first command, the text around it) of every fenced block holding a command."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for block in BLOCK.finditer(text):
            commands = [line for line in block.group(1).splitlines() if COMMAND.match(line)]
            if not commands:
                continue
            comments = " ".join(line.split("  #", 1)[1] for line in commands if "  #" in line)
            before = text[: block.start()].rstrip("\n").rsplit("\n\n", 1)[-1]
            after = text[block.end() :].lstrip("\n").split("\n\n", 1)[0]
            around = "\n".join((before, comments, after))
            found.append(pytest.param(around, id=f"{page.name}: {commands[0][:60]}"))
    return found


@pytest.mark.parametrize("around", command_blocks())
def test_a_command_block_says_what_it_costs_here(around: str) -> None:
    times = list(TIME.finditer(around))
    timed = bool(times) and re.search(r"\bhere\b|estimated", around) is not None
    assert timed or UNTIMED.search(around), around
    if any(seconds(m) > LONG_S for m in times):
        assert "**(long)**" in around, around


def test_the_anchor_and_time_rules_and_that_the_docs_have_command_blocks() -> None:
    assert github_anchor("Reproducing the paper's tables and figures") == (
        "reproducing-the-papers-tables-and-figures"
    )
    assert github_anchor("The uplink model (`channel/`)") == "the-uplink-model-channel"
    assert github_anchor("Dirichlet α (`mnist1d_dirichlet`, 1,200 rounds)") == (
        "dirichlet-α-mnist1d_dirichlet-1200-rounds"
    )
    assert len(command_blocks()) >= 10
    spans = {
        "(2 min 28 s and 25 s here)": [120.0, 28.0, 25.0],
        "13-16 min": [960.0],
        "about 30–45 min": [2700.0],
        "5 s, 1.5 h": [5.0, 5400.0],
    }
    for text, expected in spans.items():
        assert [seconds(m) for m in TIME.finditer(text)] == expected, text
