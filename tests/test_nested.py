"""map_nested: containers rebuilt, conversions applied where asked, the rest untouched."""

from __future__ import annotations

from typing import Any

from server_app.nested import DESCEND, map_nested


def _double_ints(value: Any) -> Any:
    return 2 * value if isinstance(value, int) and not isinstance(value, bool) else DESCEND


def test_every_int_is_converted_inside_dicts_lists_and_tuples_and_types_are_kept() -> None:
    value = {"a": [1, (2, "x")], "b": (3, [4.5, None]), "c": True}
    out = map_nested(value, _double_ints)
    assert out == {"a": [2, (4, "x")], "b": (6, [4.5, None]), "c": True}
    assert type(out["a"][1]) is tuple and type(out["b"][1]) is list
    assert list(out) == ["a", "b", "c"]


def test_the_input_is_left_as_it_was_and_containers_are_new() -> None:
    inner = [1, 2]
    value = {"k": inner}
    out = map_nested(value, _double_ints)
    assert value == {"k": [1, 2]} and out["k"] is not inner


def test_a_container_the_conversion_claims_is_not_entered() -> None:
    def unwrap(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"tag"}:
            return ("unwrapped", value["tag"])
        return DESCEND

    value = [{"tag": {"tag": 1}}, {"other": {"tag": 2}}]
    assert map_nested(value, unwrap) == [("unwrapped", {"tag": 1}), {"other": ("unwrapped", 2)}]


def test_a_value_that_is_no_container_comes_back_as_the_same_object() -> None:
    leaf = object()
    assert map_nested(leaf, lambda _v: DESCEND) is leaf
