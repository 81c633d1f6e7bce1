"""Each command block of docs/ says what it costs here, or why it was not timed.

In the paragraph before, the block's comments or the paragraph after: a measured time ("here"),
an estimate ("estimated") or why not ("not timed", ...); over five minutes: **(long)** too.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from doc_pages import DOCS

#: a line a user runs: the project's tools, make targets, the test-harness sweeps
COMMAND = re.compile(r"^(?:PYTHONPATH=\S+ )?(?:\.venv/bin/(?:fedcgd|python|flwr) |make |flwr run )")
BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```\n", flags=re.S | re.M)
TIME = re.compile(r"\b(\d+(?:\.\d+)?)(?:[–-](\d+(?:\.\d+)?))? ?(s|min|h|hours)\b")
UNTIMED = re.compile(r"not timed|not run here|could not be run here|cannot run here")
LONG_S = 5 * 60


def paragraph_before(text: str, start: int) -> str:
    return text[:start].rstrip("\n").rsplit("\n\n", 1)[-1]


def paragraph_after(text: str, end: int) -> str:
    return text[end:].lstrip("\n").split("\n\n", 1)[0]


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
            before = paragraph_before(text, block.start())
            around = "\n".join((before, comments, paragraph_after(text, block.end())))
            found.append(pytest.param(around, id=f"{page.name}: {commands[0][:60]}"))
    return found


def test_the_docs_have_command_blocks() -> None:
    assert len(command_blocks()) >= 10


@pytest.mark.parametrize("around", command_blocks())
def test_a_command_block_says_what_it_costs_here(around: str) -> None:
    times = list(TIME.finditer(around))
    timed = bool(times) and re.search(r"\bhere\b|estimated", around) is not None
    assert timed or UNTIMED.search(around), around
    if any(seconds(m) > LONG_S for m in times):
        assert "**(long)**" in around, around


def test_the_time_pattern_on_hand_written_phrases() -> None:
    spans = {
        "(2 min 28 s and 25 s here)": [120.0, 28.0, 25.0],
        "13-16 min": [960.0],
        "about 30–45 min": [2700.0],
        "5 s, 1.5 h": [5.0, 5400.0],
    }
    for text, expected in spans.items():
        assert [seconds(m) for m in TIME.finditer(text)] == expected, text
