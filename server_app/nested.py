"""Nested data (dicts, lists, tuples) rebuilt around a conversion of what it holds.

The walk that writes and reads the tags of checkpoint values (:mod:`server_app.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What a conversion returns for a value it does not convert: the walk goes inside it.
DESCEND: Any = object()


def map_nested(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(value)``; where that is :data:`DESCEND`, ``value`` rebuilt of converted items.

    ``convert`` sees containers before their items (so a tagged dict can be turned back into what
    it stands for). Dicts (same key order), lists and tuples are rebuilt where it descended; any
    other value it descended into comes back as the same object.
    """
    converted = convert(value)
    if converted is not DESCEND:
        return converted
    if isinstance(value, dict):
        return {key: map_nested(item, convert) for key, item in value.items()}
    if isinstance(value, list):
        return [map_nested(item, convert) for item in value]
    if isinstance(value, tuple):
        return tuple(map_nested(item, convert) for item in value)
    return value
