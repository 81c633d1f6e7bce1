"""Reading the JSON files of a result folder: bounded in size and depth, one-line errors.

Pure Python; the bounds lie far above what a run writes (docs/design.md, "Result folders").
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: Largest ``config.json`` / ``status.json`` / ``summary.json`` read (bytes).
MAX_JSON_BYTES = 64 * 2**20
#: Largest line of ``metrics.jsonl`` read (bytes).
MAX_METRICS_LINE_BYTES = 16 * 2**20
#: Deepest nesting of arrays and objects read.
MAX_JSON_DEPTH = 64


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``text`` nests arrays / objects more than ``limit`` levels (strings skipped)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def parse_json(text: str, where: str) -> Any:
    """``json.loads(text)``; ValueError naming ``where`` for bad JSON or too deep a nesting."""
    if json_depth_exceeds(text):
        raise ValueError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels; not a file of a run")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{where} is not valid JSON ({first_line_of(err)})") from err


def first_line_of(err: BaseException) -> str:
    """The first line of an exception's message, or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_bounded_text(path: str | os.PathLike[str], max_bytes: int) -> str:
    """The text of ``path`` (UTF-8, bad bytes replaced) if it holds at most ``max_bytes``.

    Raises OSError when it cannot be read, ValueError (naming it) when it is larger.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(max_bytes + 1)
    if size > max_bytes or len(data) > max_bytes:
        raise ValueError(
            f"{os.fspath(path)} holds {max(size, len(data))} bytes, more than the "
            f"{max_bytes} a run writes; not a file of a run"
        )
    return data.decode("utf-8", errors="replace")


def read_json_file(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse the JSON file ``path`` (bounded in size and depth).

    Raises OSError when it cannot be read, ValueError (one line naming it) when it is too large,
    too deep or not JSON.
    """
    where = str(Path(path))
    return parse_json(read_bounded_text(path, max_bytes), where)


def read_json_object(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> dict:
    """:func:`read_json_file` that must give a JSON object (ValueError naming the file)."""
    value = read_json_file(path, max_bytes)
    if not isinstance(value, dict):
        raise ValueError(f"{Path(path)} holds a JSON {type(value).__name__}, not an object")
    return value
