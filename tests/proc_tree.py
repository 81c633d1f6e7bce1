"""The process tree as ``/proc`` tells it, read here apart from the code under test (a witness)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent, ...), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 1 :].split()


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, grandchildren, ...), ``pid`` itself not included."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        fields = stat_fields(entry.name) if entry.name.isdigit() else None
        if fields is not None:
            children[int(fields[1])].append(int(entry.name))
    found: set[int] = set()
    pending = list(children[pid])
    while pending:
        child = pending.pop()
        if child not in found:
            found.add(child)
            pending.extend(children[child])
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def marked(name: str) -> set[int]:
    """The live processes whose environment holds ``name=1`` (what a test gave its command)."""
    needle = f"{name}=1".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def command_line(pid: int) -> str:
    """The first 150 characters of ``pid``'s command line, for failure messages."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:150]
    except OSError:
        return "?"
