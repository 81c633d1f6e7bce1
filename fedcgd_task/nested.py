"""Nested data (dicts, lists, tuples) rebuilt around a conversion of what it holds.

Checkpoints store numpy arrays and Flower records inside plain containers, tagged so that
``torch.load(weights_only=True)`` reads them (:mod:`server_app.checkpoint`,
:mod:`fedcgd_strategy.flower.aggregator_state`); writing and reading the tags is a walk over
the containers that converts some of the values. :func:`map_nested` is that walk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What a conversion returns for a value it does not convert: the walk goes inside it.
DESCEND: Any = object()


def map_nested(value: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(value)``; where that is :data:`DESCEND`, ``value`` rebuilt of converted items.

    Parameters
    ----------
    value : any
        Plain data: dicts, lists and tuples of anything.
    convert : callable
        Called on ``value`` and on every item the walk reaches, containers first (so a tagged
        dict can be turned back into what it stands for); returns the replacement or
        :data:`DESCEND`.

    Returns
    -------
    any
        A new dict (same keys, same order), list or tuple where ``convert`` descended; any
        other value it descended into comes back as it is (the same object).

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
