"""Shared validators of fedcgd_strategy.validation: hand-made bad inputs and untouched good ones."""

from __future__ import annotations

import numpy as np
import pytest
from subprocesses import assert_import_pulls_neither_flwr_nor_torch

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


def test_one_tolerance_reexported_by_problem() -> None:
    assert DISTRIBUTION_SUM_TOL == 1e-6
    assert problem.DISTRIBUTION_SUM_TOL is DISTRIBUTION_SUM_TOL


def test_import_pulls_neither_flwr_nor_torch() -> None:
    assert_import_pulls_neither_flwr_nor_torch("fedcgd_strategy.validation")


# --- label and target distributions -------------------------------------------------------------


def test_label_distributions_pass_unchanged() -> None:
    dist = [[0.25, 0.75], [1.0, 0.0], [0.5, 0.5 + 0.5 * DISTRIBUTION_SUM_TOL]]
    out = as_label_distributions(dist, num_rows=3)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.asarray(dist))


@pytest.mark.parametrize(
    ("dist", "num_rows", "match"),
    [
        ([0.5, 0.5], None, r"label_dist must have shape \[K, C\].*got shape \(2,\)"),
        (np.zeros((0, 3)), None, r"label_dist must have shape.*got shape \(0, 3\)"),
        ([[1.0, 0.0]], 2, r"label_dist must have shape \[2, C\].*got shape \(1, 2\)"),
        (
            [[1.5, -0.5]],
            None,
            r"label_dist must hold finite values >= 0, got label_dist\[0, 1\] = -0.5",
        ),
        ([[1.0, 0.0], [NAN, 1.0]], None, r"finite values >= 0, got label_dist\[1, 0\] = nan"),
        ([[0.5, 0.2], [1.0, 0.0]], None, r"label_dist rows must sum to 1 .*row 0 sums to 0.7"),
        ([["a", "b"]], None, "label_dist must be numeric"),
    ],
)
def test_label_distributions_reject_bad_input(
    dist: object, num_rows: int | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        as_label_distributions(dist, num_rows=num_rows)  # type: ignore[arg-type]


def test_label_distributions_check_only_the_given_rows() -> None:
    dist = np.array([[0.0, 0.0], [0.3, 0.7], [NAN, -1.0], [0.2, 0.2]])
    out = as_label_distributions(dist, rows=np.array([False, True, False, False]))
    np.testing.assert_array_equal(out[1], [0.3, 0.7])
    # the message quotes the caller's row number, not the position within the checked subset
    with pytest.raises(ValueError, match=r"row 3 sums to 0\.4"):
        as_label_distributions(dist, rows=np.array([False, True, False, True]))
    with pytest.raises(ValueError, match=r"label_dist\[2, 0\] = nan"):
        as_label_distributions(dist, rows=np.array([False, True, True, False]))
    with pytest.raises(ValueError, match="rows must be a bool array"):
        as_label_distributions(dist, rows=np.array([1, 2]))


def test_custom_name_is_quoted() -> None:
    with pytest.raises(ValueError, match=r"p_v rows must sum to 1"):
        as_label_distributions([[0.2, 0.2]], "p_v")


def test_target_distribution() -> None:
    np.testing.assert_array_equal(as_target_distribution([0.2, 0.8], 2), [0.2, 0.8])
    with pytest.raises(ValueError, match=r"target_dist must have shape \[3\], got shape \(2,\)"):
        as_target_distribution([0.2, 0.8], 3)
    with pytest.raises(
        ValueError, match=r"target_dist must sum to 1 \(within 1e-06\), got sum 0\.89999"
    ):
        as_target_distribution([0.2, 0.7])
    with pytest.raises(
        ValueError, match=r"target_dist must hold finite values >= 0, got target_dist\[1\] = inf"
    ):
        as_target_distribution([0.0, INF])
    with pytest.raises(ValueError, match="target_dist must have shape"):
        as_target_distribution([[0.5, 0.5]])


# --- bandwidths ----------------------------------------------------------------------------------


def test_min_bandwidths_allow_inf_and_zero() -> None:
    b = as_min_bandwidths([0.0, 2.5e5, INF], 3)
    assert b.dtype == np.float64
    np.testing.assert_array_equal(b, [0.0, 2.5e5, INF])


@pytest.mark.parametrize(
    ("value", "num", "match"),
    [
        (
            [1.0, NAN],
            None,
            r"min_bandwidth_hz must be >= 0 Hz or \+inf.*min_bandwidth_hz\[1\] = nan",
        ),
        ([-1.0, 1.0], None, r"min_bandwidth_hz\[0\] = -1\.0"),
        ([-INF], None, r"min_bandwidth_hz\[0\] = -inf"),
        ([1.0, 1.0], 3, r"min_bandwidth_hz must have shape \[3\], got shape \(2,\)"),
        (1.0, None, r"min_bandwidth_hz must have shape \[V\], got shape \(\)"),
    ],
)
def test_min_bandwidths_reject_bad_input(value: object, num: int | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        as_min_bandwidths(value, num)  # type: ignore[arg-type]


def test_total_bandwidth() -> None:
    assert check_total_bandwidth(2e7) == 2e7
    assert isinstance(check_total_bandwidth(np.float32(1.0)), float)
    assert check_total_bandwidth(0.0, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match=r"total_bandwidth_hz must be finite and > 0, got 0\.0"):
        check_total_bandwidth(0.0)
    for bad in (-1.0, INF, NAN):
        with pytest.raises(ValueError, match=r"total_bandwidth_hz must be finite and >= 0, got"):
            check_total_bandwidth(bad, allow_zero=True)
    with pytest.raises(ValueError, match="total_bandwidth_hz must be a scalar"):
        check_total_bandwidth([1.0, 2.0])  # type: ignore[arg-type]


# --- weights, non-negative values, masks, integers -----------------------------------------------


def test_weights() -> None:
    np.testing.assert_array_equal(as_weights([0.0, 3.0], 2), [0.0, 3.0])
    assert as_weights([], 0).shape == (0,)
    with pytest.raises(ValueError, match=r"weights must have a positive sum, got \[0\.0, 0\.0\]"):
        as_weights([0.0, 0.0], 2)
    with pytest.raises(
        ValueError, match=r"weights must be finite and >= 0, got weights\[1\] = -1\.0"
    ):
        as_weights([1.0, -1.0], 2)
    with pytest.raises(ValueError, match=r"num_examples must have shape \(3,\), got shape \(2,\)"):
        as_weights([1.0, 1.0], 3, "num_examples")


def test_nonnegative_array_options() -> None:
    np.testing.assert_array_equal(
        as_nonnegative_array(2.0, "class_gradient", shape=(3,), broadcast_scalar=True), [2.0] * 3
    )
    with pytest.raises(ValueError, match=r"class_gradient must have shape \(3,\) or be a scalar"):
        as_nonnegative_array([1.0, 1.0], "class_gradient", shape=(3,), broadcast_scalar=True)
    with pytest.raises(
        ValueError, match=r"batch_size must be finite and > 0, got batch_size\[1\] = 0\.0"
    ):
        as_nonnegative_array([32, 0], "batch_size", strict=True)
    # entries outside ``where`` are not checked and come back unchanged
    sizes = as_nonnegative_array([NAN, 5.0, 0.0], "n", strict=True, where=[False, True, False])
    assert np.isnan(sizes[0]) and sizes[2] == 0.0
    many = np.full(6, -1.0)
    with pytest.raises(ValueError, match=r"x\[3\] = -1\.0 \(and 2 more\)"):
        as_nonnegative_array(many, "x")


def test_nonnegative_float() -> None:
    assert as_nonnegative_float(0.0, "sigma") == 0.0
    with pytest.raises(ValueError, match=r"sigma must be finite and >= 0, got -0\.5"):
        as_nonnegative_float(-0.5, "sigma")
    with pytest.raises(ValueError, match=r"learning_rate must be finite and > 0, got 0\.0"):
        as_nonnegative_float(0.0, "learning_rate", strict=True)
    with pytest.raises(ValueError, match=r"lam must be numeric, got 'ten'"):
        as_nonnegative_float("ten", "lam")  # type: ignore[arg-type]


def test_float_array_shape() -> None:
    assert as_float_array([1, 2], "gain_lin", shape=(2,)).dtype == np.float64
    with pytest.raises(ValueError, match=r"gain_lin must have shape \(3,\), got shape \(2,\)"):
        as_float_array([1, 2], "gain_lin", shape=(3,))


def test_bool_mask() -> None:
    mask = np.array([True, False])
    assert as_bool_mask(mask, 2, "available") is mask
    with pytest.raises(
        ValueError, match=r"available must be a bool array of shape \(2,\), got dtype int"
    ):
        as_bool_mask(np.array([1, 0]), 2, "available")
    with pytest.raises(
        ValueError, match=r"mask must be a bool array of shape \(3,\).*shape \(2,\)"
    ):
        as_bool_mask(mask, 3)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (3, 3), (2.0, 2), (np.int64(5), 5)])
def test_check_integer_accepts_integral_values(value: float, expected: int) -> None:
    out = check_integer(value, "local_steps", minimum=0)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value", [1.5, NAN, INF, "3", None, -1])
def test_check_integer_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"num_candidates must be an integer >= 0, got "):
        check_integer(value, "num_candidates", minimum=0)  # type: ignore[arg-type]
