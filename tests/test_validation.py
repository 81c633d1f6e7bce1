"""Shared validators of fedcgd_strategy.validation: hand-made bad inputs and untouched good ones."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from fedcgd_strategy import problem
from fedcgd_strategy.validation import (
    DISTRIBUTION_SUM_TOL,
    as_bool_mask,
    as_float_array,
    as_label_distributions,
    as_min_bandwidths,
    as_nonnegative_array,
    as_nonnegative_float,
    as_target_distribution,
    as_weights,
    check_integer,
    check_total_bandwidth,
)

INF = float("inf")
NAN = float("nan")
ROWS = np.array([[0.0, 0.0], [0.3, 0.7], [NAN, -1.0], [0.2, 0.2]])


def test_good_values_pass_unchanged_as_the_math_types() -> None:
    assert DISTRIBUTION_SUM_TOL == 1e-6
    assert problem.DISTRIBUTION_SUM_TOL is DISTRIBUTION_SUM_TOL
    dist = [[0.25, 0.75], [1.0, 0.0], [0.5, 0.5 + 0.5 * DISTRIBUTION_SUM_TOL]]
    out = as_label_distributions(dist, num_rows=3)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.asarray(dist))
    # only the given rows are checked
    checked = as_label_distributions(ROWS, rows=np.array([False, True, False, False]))
    np.testing.assert_array_equal(checked[1], [0.3, 0.7])
    np.testing.assert_array_equal(as_target_distribution([0.2, 0.8], 2), [0.2, 0.8])
    b = as_min_bandwidths([0.0, 2.5e5, INF], 3)
    assert b.dtype == np.float64
    np.testing.assert_array_equal(b, [0.0, 2.5e5, INF])
    assert check_total_bandwidth(2e7) == 2e7
    assert isinstance(check_total_bandwidth(np.float32(1.0)), float)
    assert check_total_bandwidth(0.0, allow_zero=True) == 0.0
    np.testing.assert_array_equal(as_weights([0.0, 3.0], 2), [0.0, 3.0])
    assert as_weights([], 0).shape == (0,)
    np.testing.assert_array_equal(
        as_nonnegative_array(2.0, "class_gradient", shape=(3,), broadcast_scalar=True), [2.0] * 3
    )
    # entries outside ``where`` are not checked and come back unchanged
    sizes = as_nonnegative_array([NAN, 5.0, 0.0], "n", strict=True, where=[False, True, False])
    assert np.isnan(sizes[0]) and sizes[2] == 0.0
    assert as_nonnegative_float(0.0, "sigma") == 0.0
    assert as_float_array([1, 2], "gain_lin", shape=(2,)).dtype == np.float64
    mask = np.array([True, False])
    assert as_bool_mask(mask, 2, "available") is mask


label_dist = partial(as_label_distributions, num_rows=None)
strict = partial(as_nonnegative_array, strict=True)
scalar_g = partial(as_nonnegative_array, shape=(3,), broadcast_scalar=True)
rows = partial(partial, as_label_distributions, ROWS)
integer = partial(check_integer, name="num_candidates", minimum=0)
no_zero = partial(check_total_bandwidth, allow_zero=True)
positive = partial(as_nonnegative_float, strict=True)
three = partial(as_float_array, shape=(3,))
BAD_INTEGERS = (1.5, NAN, INF, "3", None, -1)


@pytest.mark.parametrize(
    ("validate", "args", "match"),
    [
        (label_dist, ([0.5, 0.5],), r"label_dist must have shape \[K, C\].*got shape \(2,\)"),
        (label_dist, (np.zeros((0, 3)),), r"label_dist must have shape.*got shape \(0, 3\)"),
        (partial(as_label_distributions, num_rows=2), ([[1.0, 0.0]],), r"\[2, C\].*\(1, 2\)"),
        (label_dist, ([[1.5, -0.5]],), r"finite values >= 0, got label_dist\[0, 1\] = -0.5"),
        (label_dist, ([[1.0, 0.0], [NAN, 1.0]],), r"got label_dist\[1, 0\] = nan"),
        (label_dist, ([[0.5, 0.2], [1.0, 0.0]],), r"rows must sum to 1 .*row 0 sums to 0.7"),
        (label_dist, ([["a", "b"]],), "label_dist must be numeric"),
        (label_dist, ([[0.2, 0.2]], "p_v"), r"p_v rows must sum to 1"),
        # the message quotes the caller's row number, not the position within the checked rows
        (rows(rows=np.array([False, True, False, True])), (), r"row 3 sums to 0\.4"),
        (rows(rows=np.array([False, True, True, False])), (), r"label_dist\[2, 0\] = nan"),
        (rows(rows=np.array([1, 2])), (), "rows must be a bool array"),
        (as_target_distribution, ([0.2, 0.8], 3), r"target_dist must have shape \[3\], got .*\(2,"),
        (as_target_distribution, ([0.2, 0.7],), r"must sum to 1 \(within 1e-06\), got sum 0\.8999"),
        (as_target_distribution, ([0.0, INF],), r"finite values >= 0, got target_dist\[1\] = inf"),
        (as_target_distribution, ([[0.5, 0.5]],), "target_dist must have shape"),
        (as_min_bandwidths, ([1.0, NAN],), r"must be >= 0 Hz or \+inf.*_hz\[1\] = nan"),
        (as_min_bandwidths, ([-1.0, 1.0],), r"min_bandwidth_hz\[0\] = -1\.0"),
        (as_min_bandwidths, ([-INF],), r"min_bandwidth_hz\[0\] = -inf"),
        (as_min_bandwidths, ([1.0, 1.0], 3), r"must have shape \[3\], got shape \(2,\)"),
        (as_min_bandwidths, (1.0,), r"min_bandwidth_hz must have shape \[V\], got shape \(\)"),
        (check_total_bandwidth, (0.0,), r"total_bandwidth_hz must be finite and > 0, got 0\.0"),
        (no_zero, (-1.0,), r"total_bandwidth_hz must be finite and >= 0, got"),
        (no_zero, (INF,), r"total_bandwidth_hz must be finite and >= 0, got"),
        (no_zero, (NAN,), r"total_bandwidth_hz must be finite and >= 0, got"),
        (check_total_bandwidth, ([1.0, 2.0],), "total_bandwidth_hz must be a scalar"),
        (as_weights, ([0.0, 0.0], 2), r"weights must have a positive sum, got \[0\.0, 0\.0\]"),
        (as_weights, ([1.0, -1.0], 2), r"weights must be finite and >= 0, got weights\[1\] = -1"),
        (as_weights, ([1.0, 1.0], 3, "num_examples"), r"must have shape \(3,\), got shape \(2,\)"),
        (scalar_g, ([1.0, 1.0], "class_gradient"), r"class_gradient must have shape \(3,\) or"),
        (strict, ([32, 0], "batch_size"), r"must be finite and > 0, got batch_size\[1\] = 0\.0"),
        (as_nonnegative_array, (np.full(6, -1.0), "x"), r"x\[3\] = -1\.0 \(and 2 more\)"),
        (as_nonnegative_float, (-0.5, "sigma"), r"sigma must be finite and >= 0, got -0\.5"),
        (positive, (0.0, "eta"), r"eta must be finite and > 0"),
        (as_nonnegative_float, ("ten", "lam"), r"lam must be numeric, got 'ten'"),
        (three, ([1, 2], "gain"), r"gain must have shape \(3,\), got shape \(2,\)"),
        (as_bool_mask, (np.array([1, 0]), 2, "on"), r"on must be a bool array of shape \(2,\), go"),
        (as_bool_mask, (np.array([True, False]), 3), r"mask must be a bool array of shape \(3,"),
        *[(integer, (v,), "num_candidates must be an integer >= 0, got ") for v in BAD_INTEGERS],
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_argument_and_the_value(validate, args, match) -> None:
    with pytest.raises(ValueError, match=match):
        validate(*args)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (3, 3), (2.0, 2), (np.int64(5), 5)])
def test_check_integer_accepts_integral_values(value: float, expected: int) -> None:
    out = check_integer(value, "local_steps", minimum=0)
    assert out == expected and type(out) is int
