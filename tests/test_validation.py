"""Shared validators of fedcgd_strategy.validation: hand-made bad inputs and untouched good ones.

(What a device sends is screened by the rules tested in test_misbehaving_devices.py.)
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from fedcgd_strategy.validation import as_bool_mask, as_nonnegative_array, check_integer

NAN, INF = float("nan"), float("inf")


def test_good_values_pass_unchanged_as_the_math_types() -> None:
    np.testing.assert_array_equal(
        as_nonnegative_array(2.0, "class_gradient", shape=(3,), broadcast_scalar=True), [2.0] * 3
    )
    # entries outside ``where`` are not checked and come back unchanged
    sizes = as_nonnegative_array([NAN, 5.0, 0.0], "n", strict=True, where=[False, True, False])
    assert np.isnan(sizes[0]) and sizes[2] == 0.0
    mask = np.array([True, False])
    assert as_bool_mask(mask, 2, "available") is mask
    for value, expected in [(0, 0), (2.0, 2), (np.int64(5), 5)]:
        out = check_integer(value, "local_steps", minimum=0)
        assert out == expected and type(out) is int


strict = partial(as_nonnegative_array, strict=True)
scalar_g = partial(as_nonnegative_array, shape=(3,), broadcast_scalar=True)
integer = partial(check_integer, name="num_candidates", minimum=0)


@pytest.mark.parametrize(
    ("validate", "args", "match"),
    [
        (scalar_g, ([1.0, 1.0], "class_gradient"), r"class_gradient must have shape \(3,\) or"),
        (strict, ([32, 0], "batch_size"), r"must be finite and > 0, got batch_size\[1\] = 0\.0"),
        (as_nonnegative_array, (np.full(6, -1.0), "x"), r"x\[3\] = -1\.0 \(and 2 more\)"),
        (as_nonnegative_array, ([1.0, INF], "g"), r"g must be finite and >= 0, got g\[1\] = inf"),
        (as_bool_mask, (np.array([1, 0]), 2, "on"), r"on must be a bool array of shape \(2,\), go"),
        *[(integer, (v,), "num_candidates must be an integer >= 0, got ") for v in
          (1.5, NAN, INF, "3", None, -1)],
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_argument_and_the_value(validate, args, match) -> None:
    with pytest.raises(ValueError, match=match):
        validate(*args)
