"""Problem P1 of the paper: the FedCGD device-scheduling problem.

P1 (paper Section IV-A, "Objective Transformation for Classification Problem") chooses a schedule
x in {0, 1}^V that minimises the sum of the sample-level and the device-level collective gradient
divergence bounds::

    sigma / sqrt(sum_v x_v b_v)  +  sum_c G_c | sum_v x_v p_{v,c} / sum_v x_v - p_c |

subject to ``sum_v x_v B*_v <= B`` and ``x_v = 0`` where the device cannot meet the deadline
(``B*_v = inf``). The first term is the *sampling term*, the second the *weighted earth mover's
distance* (WEMD). The empty schedule has objective ``+inf``. Pure numpy; also the checks of a
checkpoint's policy state (:func:`as_nonnegative_array`, :func:`check_integer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from channel.arrays import BoolArray, FloatArray

#: Relative slack of the bandwidth constraint, absorbing floating-point rounding of sums of B*.
BANDWIDTH_REL_TOL = 1e-9


def wemd(
    mean_dist: ArrayLike, target_dist: ArrayLike, class_gradient: ArrayLike
) -> FloatArray | float:
    """Weighted earth mover's distance ``W = sum_c G_c |q_c - p_c|``, paper eq. (G1).

    ``q`` (``mean_dist``, shape ``[..., C]``, sums to 1) is the collective label distribution of
    the scheduled devices (device-averaged), ``p`` (``target_dist``, ``[C]``) the target, ``G_c``
    (``class_gradient``, ``[C]`` or a scalar) in gradient units. Returns shape ``[...]``, gradient
    units.
    """
    diff = np.abs(np.asarray(mean_dist, dtype=float) - np.asarray(target_dist, dtype=float))
    weights = np.broadcast_to(np.asarray(class_gradient, dtype=float), diff.shape[-1:])
    out = diff @ weights
    return float(out) if np.ndim(out) == 0 else np.asarray(out)


def sampling_term(sigma: float, total_batch: ArrayLike) -> FloatArray | float:
    """Sample-level divergence bound ``sigma / sqrt(sum_v x_v b_v)``, first term of problem P1.

    ``sigma`` in gradient units, ``>= 0``; ``total_batch`` any shape, 0 (the empty schedule) giving
    ``+inf``. Returns the shape of ``total_batch``.
    """
    total = np.asarray(total_batch, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, sigma / np.sqrt(np.where(total > 0, total, 1.0)), np.inf)
    return float(out) if out.ndim == 0 else out


def read_only(array: Any) -> Any:
    """A read-only view of ``array`` (no copy; None stays None): writing into it raises."""
    if array is None:
        return None
    view = np.asarray(array).view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class SchedulingProblem:
    """One instance of problem P1 (paper Section IV-A), with read-only arrays.

    ``label_dist`` p_v float ``[V, C]``, rows >= 0 summing to 1; ``target_dist`` p float
    ``[C]``, sums to 1; ``min_bandwidth_hz`` B*_v (paper eq. (lambert)) in Hz, float ``[V]``,
    ``>= 0``, ``inf`` where the deadline cannot be met (never scheduled); ``total_bandwidth_hz``
    B in Hz, ``> 0``; ``sigma`` the per-sample gradient standard deviation, ``>= 0``;
    ``class_gradient`` G_c float ``[C]`` ``>= 0`` (a scalar G: every class); ``batch_size`` b_v
    int ``[V]`` ``> 0`` (a scalar b: every device, the paper's uniform b).
    """

    label_dist: FloatArray
    target_dist: FloatArray
    min_bandwidth_hz: FloatArray
    total_bandwidth_hz: float
    sigma: float
    class_gradient: FloatArray | float = 1.0
    batch_size: NDArray[np.int64] | int = 32

    def __post_init__(self) -> None:
        num_devices, num_classes = np.shape(self.label_dist)
        for name, shape, dtype in (
            ("label_dist", (num_devices, num_classes), np.float64),
            ("target_dist", (num_classes,), np.float64),
            ("min_bandwidth_hz", (num_devices,), np.float64),
            ("class_gradient", (num_classes,), np.float64),  # a scalar G for every class
            ("batch_size", (num_devices,), np.int64),  # a scalar b for every device
        ):
            value = np.broadcast_to(np.asarray(getattr(self, name), dtype=np.float64), shape)
            object.__setattr__(self, name, read_only(value.astype(dtype)))
        object.__setattr__(self, "total_bandwidth_hz", float(self.total_bandwidth_hz))
        object.__setattr__(self, "sigma", float(self.sigma))

    @property
    def num_devices(self) -> int:
        """Number of candidate devices ``V``."""
        return int(self.label_dist.shape[0])

    @property
    def num_classes(self) -> int:
        """Number of classes ``C``."""
        return int(self.label_dist.shape[1])

    @property
    def feasible(self) -> BoolArray:
        """Devices that can meet the deadline (finite ``B*_v``), bool ``[V]``."""
        return np.isfinite(self.min_bandwidth_hz)

    @property
    def class_gradient_array(self) -> FloatArray:
        """``G_c`` as float ``[C]`` (a scalar ``G`` broadcast to every class)."""
        return np.asarray(self.class_gradient, dtype=float)

    @property
    def batch_size_array(self) -> NDArray[np.int64]:
        """``b_v`` as int ``[V]`` (a scalar ``b`` broadcast to every device)."""
        return np.asarray(self.batch_size, dtype=np.int64)

    @property
    def uniform_batch(self) -> bool:
        """True when every device uses the same batch size (the paper's setting)."""
        batch = self.batch_size_array
        return bool(np.all(batch == batch[0]))

    @property
    def bandwidth_limit_hz(self) -> float:
        """``B`` plus the rounding slack :data:`BANDWIDTH_REL_TOL`, used by every budget test."""
        return self.total_bandwidth_hz * (1.0 + BANDWIDTH_REL_TOL)

    def _check_mask(self, mask: ArrayLike) -> BoolArray:
        """``mask`` if a bool array of shape ``[V]`` (0/1 ints: index arrays, refused)."""
        array = np.asarray(mask)
        if array.shape != (self.num_devices,) or array.dtype != np.bool_:
            raise ValueError(
                f"mask must be a bool array of shape ({self.num_devices},), got dtype "
                f"{array.dtype} and shape {array.shape}"
            )
        return array

    def wemd(self, mask: ArrayLike) -> float:
        """WEMD of the schedule ``mask`` (bool ``[V]``), paper eq. (G1); ``inf`` if empty."""
        sel = self._check_mask(mask)
        count = int(sel.sum())
        if count == 0:
            return float("inf")
        mean = self.label_dist[sel].sum(axis=0) / count
        return float(wemd(mean, self.target_dist, self.class_gradient_array))

    def sampling_term(self, mask: ArrayLike) -> float:
        """Return ``sigma / sqrt(sum_v x_v b_v)`` for ``mask``; ``inf`` if empty."""
        sel = self._check_mask(mask)
        return float(sampling_term(self.sigma, int(self.batch_size_array[sel].sum())))

    def objective(self, mask: ArrayLike) -> float:
        """Objective of P1 for ``mask`` (sampling term + WEMD); ``inf`` for the empty schedule.

        Feasibility is not checked here; see :meth:`is_feasible`.
        """
        sel = self._check_mask(mask)
        if not sel.any():
            return float("inf")
        return self.sampling_term(sel) + self.wemd(sel)

    def bandwidth_used_hz(self, mask: ArrayLike) -> float:
        """Total minimum bandwidth ``sum_v x_v B*_v`` of ``mask`` in Hz."""
        sel = self._check_mask(mask)
        return float(self.min_bandwidth_hz[sel].sum())

    def is_feasible(self, mask: ArrayLike) -> bool:
        """Check that ``mask`` schedules no infeasible device and fits the budget ``B``.

        The budget test allows a relative slack of :data:`BANDWIDTH_REL_TOL` for rounding.
        """
        sel = self._check_mask(mask)
        if np.any(sel & ~self.feasible):
            return False
        return self.bandwidth_used_hz(sel) <= self.bandwidth_limit_hz


def as_nonnegative_array(
    value: Any, name: str, *, shape: tuple[int, ...] | None = None
) -> FloatArray:
    """``value`` as float64 (of ``shape`` if given), every entry finite and ``>= 0``; else a
    ValueError naming ``name`` and the first entries that are not."""  # noqa: D205, D209
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {value!r}") from exc
    if shape is not None and array.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got shape {array.shape}")
    bad = ~np.isfinite(array) | (array < 0)
    if bad.any():
        at = np.argwhere(bad)
        quoted = [f"{name}[{', '.join(map(str, pos))}] = {array[tuple(pos)].item()!r}"
                  for pos in at[:4]] if array.ndim else [repr(array.item())]  # fmt: skip
        more = f" (and {len(at) - 4} more)" if len(at) > 4 else ""
        raise ValueError(f"{name} must be finite and >= 0, got {', '.join(quoted)}{more}")
    return array


def check_integer(value: float, name: str, *, minimum: int) -> int:
    """``value`` as an int, if integral (``2.0`` passes) and ``>= minimum``."""
    try:
        integral = int(value) == value
    except (TypeError, ValueError, OverflowError):
        integral = False
    if not integral or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
