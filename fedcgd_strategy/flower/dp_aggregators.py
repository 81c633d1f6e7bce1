"""Flower's server-side differential privacy as the aggregator of the scheduled uploads.

``aggregator = 'DifferentialPrivacyServerSideFixedClipping'`` or
``'DifferentialPrivacyServerSideAdaptiveClipping'`` (or an import path to them or to a
subclass): Flower's wrapper clips every scheduled upload's update to an L2 norm, hands the
clipped uploads to the strategy it wraps, and adds Gaussian noise to the aggregate (Andrew et
al. 2019 for the adaptive clipping norm). All of that is Flower's code, its
``aggregate_train``; nothing of it is re-implemented here. ``aggregator-params`` hold

* ``strategy``: the strategy to wrap, named as ``aggregator`` is (default ``'FedAvg'``,
  Flower's; not another DP wrapper), and ``strategy-params``: its own parameters, a table
  (``aggregator-params.strategy-params.beta = 0.2``), checked like ``aggregator-params``;
* the wrapper's own parameters: ``noise-multiplier`` and ``clipping-norm`` (fixed clipping);
  ``noise-multiplier``, ``initial-clipping-norm``, ``target-clipped-quantile``,
  ``clip-norm-lr``, ``clipped-count-stddev`` (adaptive clipping).

Where Flower's interface made this module adapt (docs/design.md, "Server-side differential
privacy"):

* ``num_sampled_clients``: Flower's wrappers expect the same number of replies every round and
  calibrate the noise to it (standard deviation z C / n, ``compute_stdv``). The scheduler's
  number of uploads varies, so the wrapper is built with n = ``num-devices`` (the most a
  round can have; the adaptive wrapper derives its default ``clipped-count-stddev`` = n / 20
  from it) and, before each round's ``aggregate_train``, set to the round's number of uploads
  (:func:`dp_inputs`). The parameter is therefore not settable.
* Uniform weights: every upload weighs 1, not |D_v|. The noise z C / n is calibrated to the
  plain mean of n clipped updates (with weights |D_v| one device could move the aggregate by
  more than C / n); Flower's own accounting likewise demands equal weights.
* Integer arrays (a researcher's model with BatchNorm counters): Flower's clipping scales the
  arrays in place, which numpy refuses for integers; they are handed over as float64, and the
  aggregate is cast back to the model's dtypes (rounded) like every aggregator's.
* Noise: Flower draws it (and the adaptive wrapper its noisy clipped count) from numpy's global
  generator. :func:`numpy_global_seeded` seeds that generator from (run seed, round) around the
  call and puts its previous state back afterwards, so the same seed gives the same run, and a
  resumed run draws the same noise as the uninterrupted one.
* ``accountant``: Flower's privacy accountant is an object; a run config cannot hold one, so
  accounting is not offered here (refused).

Two deviations, fixes of Flower 1.42's message-based adaptive wrapper, in this module's
:class:`DifferentialPrivacyServerSideAdaptiveClipping` (built where the run config names
Flower's; every other step is Flower's):

* The update's sign. Flower counts the *clipped* updates (its ``norm_bit`` is "scaled down")
  but updates the clipping norm with Andrew et al.'s rule, which takes the fraction *not*
  clipped: C <- C exp(-lr (clipped - q)). More clipped updates than the target then shrink C
  further, and the norm collapses (on the default digits run from 0.5 to 0.003 in 50 rounds).
  The replaced ``_geometric_update`` is Andrew et al.'s rule with b = the fraction not
  clipped and gamma = 1 - q, so that ``target-clipped-quantile`` q means what Flower's
  Message-API wrapper documents: the fraction of updates to clip (C settles at the (1 - q)
  quantile of the update norms). Flower's older ``DPFedAvgAdaptive`` and Andrew et al. name
  the other fraction: their ``clip_norm_target_quantile`` gamma is the fraction *not* clipped
  (gamma = 1 - q; the same at the default 0.5).
* The noise's scale. Flower updates C before it adds the noise, so the round's noise is
  scaled by the next round's norm C_{t+1} while the updates were clipped to C_t (too little
  noise in a round where C shrinks). The noise is scaled by C_t, as in Andrew et al.'s
  Algorithm 1.

The adaptive wrapper's clipping norm is state: it is saved in the checkpoint with the
wrapped strategy's state (:mod:`fedcgd_strategy.flower.aggregator_state`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping as FlowerAdaptiveClipping,
)
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, Strategy
from flwr.supercore.logger import FLOWER_LOGGER
from numpy.typing import NDArray

from fedcgd_strategy.flower.aggregator_params import check_ranges
from fedcgd_strategy.flower.aggregator_registry import (
    PARAMS_KEY,
    SCHEDULER_OWNS,
    aggregator_arguments,
    aggregator_class,
    build_strategy,
    class_path,
    resolved_strategy,
)
from fedcgd_task.constructor_params import constructor_arguments, kebab, with_defaults
from fedcgd_task.imports import first_line

#: Flower's server-side DP wrappers (and their subclasses) are built here.
SERVER_SIDE_DP: tuple[type[Strategy], ...] = (
    DifferentialPrivacyServerSideFixedClipping,
    FlowerAdaptiveClipping,
)
#: ``aggregator-params`` names of the wrapped strategy and of its parameters.
INNER_NAME, INNER_PARAMS = "strategy", "strategy-params"
#: The run-config keys these are, as the messages name them.
INNER_KEY, INNER_TABLE = f"{PARAMS_KEY}.{INNER_NAME}", f"{PARAMS_KEY}.{INNER_PARAMS}"
#: The wrapped strategy when ``strategy`` is not given: Flower's FedAvg.
DEFAULT_INNER = "FedAvg"
#: The wrapper's parameters ``aggregator-params`` may not set, and why.
DP_OWNS: dict[str, str] = {
    "num_sampled_clients": "set every round to the round's number of uploads n (the noise's "
    "standard deviation is z C / n)",
    "accountant": "Flower's privacy accountant is an object a run config cannot hold; "
    "accounting is not offered here",
}
#: Attribute holding, within one ``aggregate_train``, the norm the round clipped with.
ROUND_NORM = "_round_clipping_norm"
#: Stream tag of the noise's seed (mixed with the run seed and the round): "NOIS".
NOISE_STREAM = 0x4E4F4953


class DifferentialPrivacyServerSideAdaptiveClipping(FlowerAdaptiveClipping):
    """Flower's server-side adaptive clipping with the steps of Andrew et al.'s Algorithm 1.

    Everything (clipping, the noisy clipped count, the noise, the wrapped strategy's
    aggregation) is Flower's class of the same name (``flwr.serverapp.strategy``), which the
    run config names; two steps are replaced (see the module's notes): the clipping-norm
    update (:meth:`_geometric_update`) and the norm the noise is scaled by
    (:meth:`_add_noise_to_aggregated_arrays`: the round's, C_t, not the updated C_{t+1}). The
    name is Flower's so that messages name the class as the run config does.
    """

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's ``aggregate_train``, the norm it clips with held for the round's noise.

        The norm is held only during the call (an attribute left behind would become part of
        the checkpointed state).
        """
        setattr(self, ROUND_NORM, self.clipping_norm)
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            self.__dict__.pop(ROUND_NORM, None)

    def _geometric_update(self, clipped_fraction: float) -> None:
        """C <- C exp(-lr (b - gamma)): Andrew et al. 2019 (arXiv:1905.03871), Algorithm 1.

        b = 1 - ``clipped_fraction`` is the noisy fraction of updates not clipped (norm <= C),
        gamma = 1 - ``target_clipped_quantile`` the target fraction not clipped, lr =
        ``clip_norm_lr``. More clipped updates than the target make C grow.
        """
        unclipped = 1.0 - clipped_fraction
        target_unclipped = 1.0 - self.target_clipped_quantile
        self.clipping_norm *= math.exp(-self.clip_norm_lr * (unclipped - target_unclipped))

    def _add_noise_to_aggregated_arrays(self, aggregated: ArrayRecord) -> ArrayRecord:
        """Flower's Gaussian noise, standard deviation z C_t / n with C_t the round's norm.

        Flower updates C before it adds the noise and so scales the noise by C_{t+1}; the
        sensitivity of the mean of n updates clipped to C_t is C_t / n, and Andrew et al.'s
        Algorithm 1 noises with C_t before it updates C.
        """
        updated = self.clipping_norm
        self.clipping_norm = self.__dict__.get(ROUND_NORM, updated)
        try:
            return super()._add_noise_to_aggregated_arrays(aggregated)
        finally:
            self.clipping_norm = updated


def is_dp_class(cls: type) -> bool:
    """True for Flower's server-side DP wrappers and their subclasses."""
    return issubclass(cls, SERVER_SIDE_DP)


def is_dp(aggregator: object) -> bool:
    """True when ``aggregator`` is one of Flower's server-side DP wrappers."""
    return isinstance(aggregator, SERVER_SIDE_DP)


def inner_strategy(aggregator: Strategy) -> Strategy:
    """The strategy that aggregates: a DP wrapper's wrapped one, else ``aggregator`` itself."""
    held = getattr(aggregator, "strategy", None) if is_dp(aggregator) else None
    return held if isinstance(held, Strategy) else aggregator


def _split(params: Mapping[str, object]) -> tuple[str, dict[str, Any], dict[str, object]]:
    """(wrapped strategy's name, its parameters, the wrapper's own parameters), checked."""
    inner: object = DEFAULT_INNER
    inner_params: object = {}
    own: dict[str, object] = {}
    spelled: dict[str, str] = {}  # INNER_NAME / INNER_PARAMS -> the key that gave it
    for key, value in params.items():
        name = kebab(key)
        if name in spelled:
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key} names the same setting as "
                f"{PARAMS_KEY}.{spelled[name]}; give it once"
            )
        if name == INNER_NAME:
            inner, spelled[name] = value, key
        elif name == INNER_PARAMS:
            inner_params, spelled[name] = value, key
        else:
            own[key] = value
    if not isinstance(inner, str) or not inner:
        raise ValueError(
            f"run-config key {INNER_KEY} = {inner!r}; allowed: the strategy to wrap, named as "
            f"'aggregator' names one (default {DEFAULT_INNER!r})"
        )
    if not isinstance(inner_params, dict):
        raise ValueError(
            f"run-config key {INNER_TABLE} = {inner_params!r}; allowed: a table of {inner}'s "
            f"parameters, e.g. {INNER_TABLE}.beta = 0.2"
        )
    return inner, inner_params, own


def _refused() -> dict[str, str]:
    """The wrapper's parameters ``aggregator-params`` may not set, and why."""
    refused = {n: f"not settable here ({why})" for n, why in {**SCHEDULER_OWNS, **DP_OWNS}.items()}
    refused[INNER_NAME] = f"{INNER_KEY} names it"  # read by _split: never reached
    return refused


def dp_arguments(
    setting: str, params: Mapping[str, object], num_devices: int | None = None
) -> tuple[str, dict[str, Any], dict[str, object]]:
    """Check ``aggregator-params`` of a DP wrapper; (wrapped name, its params, wrapper kwargs).

    Raises
    ------
    ValueError
        One line naming ``aggregator-params.<name>``, the value and what is allowed: the
        wrapped strategy cannot be built (an unknown name, another DP wrapper, a bad parameter
        of its own), a parameter the wrapper does not take or that the scheduler sets
        (:data:`DP_OWNS`, :data:`~fedcgd_strategy.flower.aggregator_registry.SCHEDULER_OWNS`),
        two spellings of one name, a value of another type or out of its range
        (:func:`~fedcgd_strategy.flower.aggregator_params.check_ranges`), or a required one
        missing.

    """
    cls = aggregator_class(setting)
    inner, inner_params, own = _split(params)
    if is_dp_class(aggregator_class(inner, INNER_KEY)):
        raise ValueError(
            f"run-config key {INNER_KEY} = {inner!r} is a DP wrapper itself; allowed: a "
            "strategy that aggregates (FedAvg, FedTrimmedAvg, ...)"
        )
    owner = f"aggregator {setting!r}"
    arguments = constructor_arguments(
        cls,
        own,
        table=PARAMS_KEY,
        owner=owner,
        refused=_refused(),
        also_allowed=(INNER_NAME, INNER_PARAMS),
    )
    check_ranges(cls, arguments, table=PARAMS_KEY, owner=owner, num_devices=num_devices)
    return inner, inner_params, arguments


def dp_class(setting: str) -> type[Strategy]:
    """The class built for ``setting``: this module's adaptive wrapper for Flower's own."""
    cls = aggregator_class(setting)
    return DifferentialPrivacyServerSideAdaptiveClipping if cls is FlowerAdaptiveClipping else cls


def make_dp_aggregator(setting: str, params: Mapping[str, object], num_devices: int) -> Strategy:
    """Flower's DP wrapper ``setting`` around the strategy ``aggregator-params`` name.

    Built with ``num_sampled_clients = num_devices`` (see the module's notes; each round sets
    it to the round's number of uploads). Flower's adaptive wrapper is built as this module's
    :class:`DifferentialPrivacyServerSideAdaptiveClipping` (:func:`dp_class`); a subclass of
    it named by import path is built as it is.

    Raises
    ------
    ValueError
        One line: see :func:`dp_arguments`; or the wrapper's constructor refused the values.

    """
    inner, inner_params, arguments = dp_arguments(setting, params, num_devices)
    checked = aggregator_arguments(inner, inner_params, INNER_KEY, INNER_TABLE, num_devices)
    wrapped = build_strategy(inner, checked, INNER_KEY)
    cls: Any = dp_class(setting)  # a DP wrapper's constructor (is_dp_class)
    try:
        return typing.cast(
            Strategy, cls(strategy=wrapped, num_sampled_clients=num_devices, **arguments)
        )
    except Exception as err:
        shown = {kebab(k): v for k, v in arguments.items()}
        raise ValueError(
            f"run-config key {PARAMS_KEY} = {shown!r} for aggregator {setting!r} "
            f"(num-devices = {num_devices}): {type(err).__name__}: {first_line(err)}"
        ) from err


def resolved_dp(setting: str, params: Mapping[str, object], num_devices: int) -> dict[str, Any]:
    """What ``config.json`` records of a DP wrapper: its class, parameters and wrapped strategy.

    ``{"class": ..., "params": ..., "strategy": {"class": ..., "params": ...}}``; the
    parameters are the given values and the constructors' defaults for the others, with the
    adaptive wrapper's ``clipped-count-stddev`` as Flower derives it when not given
    (``num_sampled_clients`` / 20 = num-devices / 20 for z > 0, else 0).

    Raises
    ------
    ValueError
        One line: see :func:`make_dp_aggregator`.

    """
    previous = FLOWER_LOGGER.level
    FLOWER_LOGGER.setLevel(max(previous, logging.ERROR))  # its warnings came with the check
    try:
        built = make_dp_aggregator(setting, params, num_devices)
    finally:
        FLOWER_LOGGER.setLevel(previous)
    inner, inner_params, arguments = dp_arguments(setting, params, num_devices)
    cls = dp_class(setting)
    resolved = with_defaults(cls, arguments, refused=_refused())
    if "clipped_count_stddev" in resolved:
        resolved["clipped_count_stddev"] = float(getattr(built, "clipped_count_stddev"))  # noqa: B009
    return {
        "class": class_path(cls),
        "params": {kebab(k): v for k, v in resolved.items()},
        "strategy": resolved_strategy(inner, inner_params, INNER_KEY, INNER_TABLE),
    }


Arrays = Mapping[str, NDArray[np.generic]]


def _floats(arrays: Arrays) -> dict[str, NDArray[np.generic]]:
    """``arrays`` with integer (and bool) arrays as float64, the others as they are."""
    return {
        k: v.astype(np.float64) if v.dtype.kind in "biu" else v
        for k, v in ((k, np.asarray(v)) for k, v in arrays.items())
    }


def dp_inputs(
    aggregator: Strategy, models: Sequence[Arrays], reference: Arrays
) -> tuple[list[dict[str, NDArray[np.generic]]], list[int], dict[str, NDArray[np.generic]]]:
    """What a DP wrapper gets this round: (uploads, weights, global model).

    Sets the wrapper's ``num_sampled_clients`` to the round's number of uploads; the weights
    are all 1 (uniform); integer arrays become float64 (see the module's notes).
    """
    setattr(aggregator, "num_sampled_clients", len(models))  # noqa: B010
    return [_floats(m) for m in models], [1] * len(models), _floats(reference)


def noise_seed(seed: int, server_round: int) -> NDArray[np.uint32]:
    """The seed of numpy's global generator for round ``server_round`` of run ``seed``."""
    state = np.random.SeedSequence([seed, NOISE_STREAM, server_round]).generate_state(8)
    return state.astype(np.uint32)


@contextlib.contextmanager
def numpy_global_seeded(seed: int, server_round: int) -> Iterator[None]:
    """Seed numpy's global generator from (``seed``, ``server_round``); restore it after.

    Flower's DP wrappers draw their noise with ``np.random.normal``; inside this block that
    draw depends on the run's seed and the round only, and whatever else uses the global
    generator sees it as if the block had not run.
    """
    # the legacy global generator on purpose: it is the one Flower's wrappers draw from
    saved = np.random.get_state()  # noqa: NPY002
    np.random.seed(noise_seed(seed, server_round))  # noqa: NPY002
    try:
        yield
    finally:
        np.random.set_state(saved)  # noqa: NPY002
