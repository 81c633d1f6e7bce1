"""Flower's server-side differential privacy as the aggregator of the scheduled uploads.

Flower's DP wrappers clip, aggregate (the wrapped strategy) and add noise in their own
``aggregate_train``; this module builds them from the run config and adapts their interface to
a scheduler (docs/design.md, "Server-side differential privacy"; docs/aggregation.md).
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

    Flower's class of the same name with two steps replaced: the clipping-norm update
    (:meth:`_geometric_update`) and the norm the noise is scaled by (the round's C_t, not the
    updated C_{t+1}). The name is Flower's so that messages name the class as the run config does.
    """

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's ``aggregate_train``, the norm it clips with held for the round's noise.

        Held only during the call (an attribute left behind would be checkpointed).
        """
        setattr(self, ROUND_NORM, self.clipping_norm)
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            self.__dict__.pop(ROUND_NORM, None)

    def _geometric_update(self, clipped_fraction: float) -> None:
        """C <- C exp(-lr (b - gamma)): Andrew et al. 2019 (arXiv:1905.03871), Algorithm 1.

        b = 1 - ``clipped_fraction`` (the noisy fraction not clipped), gamma = 1 -
        ``target_clipped_quantile``, lr = ``clip_norm_lr``.
        """
        unclipped = 1.0 - clipped_fraction
        target_unclipped = 1.0 - self.target_clipped_quantile
        self.clipping_norm *= math.exp(-self.clip_norm_lr * (unclipped - target_unclipped))

    def _add_noise_to_aggregated_arrays(self, aggregated: ArrayRecord) -> ArrayRecord:
        """Flower's Gaussian noise, standard deviation z C_t / n (C_t: the round's norm)."""
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

    Raises ValueError (one line naming ``aggregator-params.<name>``, the value and what is
    allowed) for a wrapped strategy that cannot be built or is a DP wrapper, a parameter the
    wrapper does not take or the scheduler sets, two spellings of one name, a value of another type
    or out of range, or a required one missing.
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

    Built with ``num_sampled_clients = num_devices`` (each round sets it to the round's uploads)
    and as :func:`dp_class` says. Raises ValueError (one line) as :func:`dp_arguments` does or
    when the constructor refuses the values.
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

    ``{"class": ..., "params": ..., "strategy": {"class": ..., "params": ...}}``, parameters
    completed by the constructors' defaults (``clipped-count-stddev`` as Flower derives it).
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
    """What a DP wrapper gets this round: (uploads as float, weights all 1, global model).

    Sets the wrapper's ``num_sampled_clients`` to the round's number of uploads.
    """
    setattr(aggregator, "num_sampled_clients", len(models))  # noqa: B010
    return [_floats(m) for m in models], [1] * len(models), _floats(reference)


def noise_seed(seed: int, server_round: int) -> NDArray[np.uint32]:
    """The seed of numpy's global generator for round ``server_round`` of run ``seed``."""
    state = np.random.SeedSequence([seed, NOISE_STREAM, server_round]).generate_state(8)
    return state.astype(np.uint32)


@contextlib.contextmanager
def numpy_global_seeded(seed: int, server_round: int) -> Iterator[None]:
    """Seed numpy's global generator (Flower's noise) from the run seed and round; restore it."""
    # the legacy global generator on purpose: it is the one Flower's wrappers draw from
    saved = np.random.get_state()  # noqa: NPY002
    np.random.seed(noise_seed(seed, server_round))  # noqa: NPY002
    try:
        yield
    finally:
        np.random.set_state(saved)  # noqa: NPY002


def dp_round_noise(aggregator: Strategy, uploads: int) -> tuple[float, float] | None:
    """The clipping norm C a round clips with and its noise's standard deviation z C / n.

    Read before the round's aggregation (which moves the adaptive wrapper's C to the next
    round's): C, and Flower's ``compute_stdv`` with the wrapper's noise multiplier z (for the
    adaptive wrapper the updates' share of it, as Flower splits it) and n = ``uploads``. None
    for an aggregator without DP.
    """
    if not is_dp(aggregator):
        return None
    wrapper: Any = aggregator
    norm = float(wrapper.clipping_norm)
    return norm, float(wrapper.noise_multiplier) * norm / uploads
