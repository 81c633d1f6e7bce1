"""From the run config's ``aggregator`` and ``aggregator-params`` to a Flower strategy.

Names, the checks and the table of ranges (:data:`RANGES`), the server-side DP wrapper's
replaced steps, and what ``config.json`` records: docs/aggregation.md ("Allowed values") and
docs/design.md ("Any Flower aggregation", "Server-side differential privacy").
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp import strategy as flower
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.dp_adaptive_clipping import DifferentialPrivacyAdaptiveBase
from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase
from flwr.serverapp.strategy.fedopt import FedOpt
from flwr.supercore.logger import FLOWER_LOGGER

from fedcgd_task.constructor_params import constructor_arguments, kebab, with_defaults
from fedcgd_task.imports import REFERENCE_FORMS, first_line, import_object, is_reference

AGGREGATOR_KEY, PARAMS_KEY = "aggregator", "aggregator-params"
#: A DP wrapper's parameters naming the strategy it wraps (default FedAvg) and its table.
INNER, INNER_PARAMS = "strategy", "strategy-params"
#: Constructor parameters ``aggregator-params`` may not set, and why.
REFUSED: dict[str, str] = dict.fromkeys(
    inspect.signature(flower.FedAvg).parameters,
    "the scheduler's: the policy chooses who trains, the ServerApp evaluates, uploads are "
    "weighted by |D_v|",
) | {
    "num_sampled_clients": "set every round to the round's number of uploads n (the noise's "
    "standard deviation is z C / n)",
    "accountant": "Flower's privacy accountant is an object a run config cannot hold",
}
#: Strategies that change the clients' training, which this app's clients do not do.
CLIENT_SIDE: dict[type, str] = {
    flower.FedProx: "FedProx changes the clients' training (a proximal term), not the "
    "aggregation, which is FedAvg's",
    flower.DifferentialPrivacyClientSideFixedClipping: "client-side clipping needs the "
    "clients' fixedclipping_mod; name DifferentialPrivacyServerSideFixedClipping",
    flower.DifferentialPrivacyClientSideAdaptiveClipping: "client-side clipping needs the "
    "clients' adaptiveclipping_mod; name DifferentialPrivacyServerSideAdaptiveClipping",
}
#: Flower class -> numeric parameter -> (allowed interval, why): Flower 1.42's docs and source
#: or the update rule; a class takes the nearest entry along its MRO; V is num-devices; 10 caps
#: learning rates Flower leaves unbounded; any other float must be finite (:data:`FINITE`).
RANGES: dict[type, dict[str, tuple[str, str]]] = {
    FedOpt: {
        "eta": ("(0, 10]", "the server's step; FedOpt's docs: server-side learning rate"),
        "eta_l": ("(0, 10]", "Flower's FedOpt only logs it; clients use learning-rate"),
        "beta_1": ("[0, 1)", "first-moment decay; FedAdam divides by 1 - beta_1^t"),
        "beta_2": ("[0, 1)", "second-moment decay"),
        "tau": ("(0, inf)", "the step divides by sqrt(v_t) + tau: FedOpt's adaptivity"),
    },
    flower.FedAvgM: {
        "server_learning_rate": ("(0, 10]", "the server's step (1: FedAvg's)"),
        "server_momentum": ("[0, 1)", "1 never forgets an update; Hsu et al. 2019: < 1"),
    },
    flower.FedTrimmedAvg: {"beta": ("[0, 0.5)", "cut at each end; FedTrimmedAvg's docs")},
    flower.MultiKrum: {
        "num_malicious_nodes": ("[0, inf)", "f, the attackers assumed; Krum: 2 f + 3 uploads"),
        "num_nodes_to_select": ("[1, V]", "the uploads averaged, 1 is Krum, V all (FedAvg)"),
    },
    flower.Bulyan: {"num_malicious_nodes": ("[0, inf)", "f; Bulyan needs 4 f + 3 uploads")},
    flower.QFedAvg: {
        "client_learning_rate": ("(0, 10]", "QFedAvg's Lipschitz estimate is its inverse"),
        "q": ("[0, inf)", "fairness; q = 0 is FedAvg, QFedAvg's docs"),
    },
    DifferentialPrivacyFixedClippingBase: {
        "noise_multiplier": ("[0, inf)", "z; Flower: non-negative"),
        "clipping_norm": ("(0, inf)", "C; Flower: positive"),
    },
    DifferentialPrivacyAdaptiveBase: {
        "noise_multiplier": ("[0, inf)", "z; Flower: non-negative"),
        "initial_clipping_norm": ("(0, inf)", "C_0; Flower: positive"),
        "target_clipped_quantile": ("[0, 1]", "the fraction of updates to clip; Flower"),
        "clip_norm_lr": ("(0, 10]", "C moves by up to e^lr a round; Andrew et al.: 0.2"),
        "clipped_count_stddev": ("[0, inf)", "noise of the clipped count; Flower"),
    },
}
FINITE = ("(-inf, inf)", "NaN and inf are no setting")
#: Where a parameter left unset comes from, when not the class's default (``config.json``).
DERIVED = {"clipped-count-stddev": "Flower's default for num-devices (V / 20)"}
#: Flower's server-side DP wrappers (and their subclasses).
SERVER_SIDE_DP = (
    flower.DifferentialPrivacyServerSideFixedClipping,
    flower.DifferentialPrivacyServerSideAdaptiveClipping,
)


class DifferentialPrivacyServerSideAdaptiveClipping(
    flower.DifferentialPrivacyServerSideAdaptiveClipping
):
    """Flower's adaptive clipping with the two steps of Andrew et al.'s Algorithm 1.

    Built in place of Flower's, under its name (messages name the class as the run config does).
    """

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's, the norm it clips with held for the round's noise (during the call only)."""
        self._round_norm = self.clipping_norm
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            del self._round_norm

    def _geometric_update(self, clipped_fraction: float) -> None:
        """C <- C exp(-lr (b - gamma)): Andrew et al. 2019 (arXiv:1905.03871), Algorithm 1.

        b = 1 - ``clipped_fraction`` (the noisy fraction not clipped), gamma = 1 -
        ``target_clipped_quantile``, lr = ``clip_norm_lr``.
        """
        unclipped, target_unclipped = 1.0 - clipped_fraction, 1.0 - self.target_clipped_quantile
        self.clipping_norm *= math.exp(-self.clip_norm_lr * (unclipped - target_unclipped))

    def _add_noise_to_aggregated_arrays(self, aggregated: ArrayRecord) -> ArrayRecord:
        """Flower's Gaussian noise, standard deviation z C_t / n (C_t: the round's norm)."""
        updated, self.clipping_norm = self.clipping_norm, self._round_norm
        try:
            return super()._add_noise_to_aggregated_arrays(aggregated)
        finally:
            self.clipping_norm = updated


def parameter_range(cls: type, name: str) -> tuple[str, str] | None:
    """The (interval, why) of ``cls``'s parameter ``name`` (:data:`RANGES`)."""
    return next((RANGES[c][name] for c in cls.__mro__ if name in RANGES.get(c, {})), None)


def out_of_range(interval: str, value: float, num_devices: int | None) -> str | None:
    """None if ``value`` is in ``interval``; else what it allows, e.g. ``a number in [0, 1)``."""
    low, high = (float(num_devices or "inf" if x == "V" else x) for x in interval[1:-1].split(", "))
    left, right = interval[0] == "(", interval[-1] == ")"
    above = low < value if left else low <= value
    if math.isfinite(value) and above and (value < high if right else value <= high):
        return None
    kind = "an integer" if isinstance(value, int) else "a number"
    if math.isinf(high):
        return "a finite number" if math.isinf(low) else f"{kind} {'>' if left else '>='} {low:g}"
    return f"{kind} in {interval[0]}{low:g}, {high:g}{interval[-1]}"


def short_names() -> list[str]:
    """The Flower strategies an ``aggregator`` may name without a module path."""
    found = {n: getattr(flower, n) for n in flower.__all__ if n != "Strategy"}
    return [n for n, c in found.items() if isinstance(c, type) and issubclass(c, Strategy)]


def aggregator_class(setting: str, key: str = AGGREGATOR_KEY) -> type[Strategy]:
    """The strategy class ``setting`` names, ours for Flower's adaptive DP (ValueError: 1 line)."""
    if not (is_reference(setting) or setting in short_names()):
        default = '"" (the scheduler\'s FedAvg), ' if key == AGGREGATOR_KEY else ""
        raise ValueError(
            f"run-config key {key!r} = {setting!r}; allowed: {default}a Flower strategy "
            f"({', '.join(short_names())}) or a Strategy subclass as {REFERENCE_FORMS}"
        )
    found = import_object(setting, key) if is_reference(setting) else getattr(flower, setting)
    if not (isinstance(found, type) and issubclass(found, Strategy)):
        raise ValueError(
            f"run-config key {key!r} = {setting!r} is {found!r}, not a subclass of "
            "flwr.serverapp.strategy.Strategy"
        )
    for refused, why in CLIENT_SIDE.items():
        if issubclass(found, refused):
            raise ValueError(f"run-config key {key!r} = {setting!r}: {why}; refused")
    replaced = found is flower.DifferentialPrivacyServerSideAdaptiveClipping
    return DifferentialPrivacyServerSideAdaptiveClipping if replaced else found


def _given(params: Mapping[str, object], name: str, table: str, default: object) -> object:
    """``params``' value of ``name`` in either spelling (ValueError: given twice)."""
    found = [k for k in params if kebab(k) == name]
    if len(found) > 1:
        raise ValueError(f"run-config key {table}.{found[1]} names {table}.{found[0]} again; "
                         "give it once")  # fmt: skip
    return params[found[0]] if found else default


def build(
    setting: str,
    params: Mapping[str, object],
    num_devices: int | None,
    key: str = AGGREGATOR_KEY,
    table: str = PARAMS_KEY,
) -> tuple[Strategy, dict[str, Any]]:
    """The strategy ``setting`` names, built from the run-config table ``table``, and its record.

    Each refusal is one line naming ``<table>.<name>``, the value and what is allowed; V for
    :data:`RANGES` is ``num_devices``, a DP wrapper's n too. The record is ``config.json``'s
    ``aggregator_resolved``: class, every parameter as built, where each came from.
    """
    cls, owner, own = aggregator_class(setting, key), f"aggregator {setting!r}", params
    extra: dict[str, Any] = {}
    record: dict[str, Any] | None = None
    refused = {n: f"not settable here ({why})" for n, why in REFUSED.items()}
    if issubclass(cls, SERVER_SIDE_DP):
        own = {k: v for k, v in params.items() if kebab(k) not in (INNER, INNER_PARAMS)}
        refused[INNER] = f"{table}.{INNER} names it"
        wrapped = _given(params, INNER, table, "FedAvg")
        sub = _given(params, INNER_PARAMS, table, {})
        if not isinstance(wrapped, str) or not wrapped:
            raise ValueError(
                f"run-config key {table}.{INNER} = {wrapped!r}; allowed: the strategy to wrap, "
                "named as 'aggregator' names one (default FedAvg)"
            )
        if not isinstance(sub, dict):
            raise ValueError(
                f"run-config key {table}.{INNER_PARAMS} = {sub!r}; allowed: a table of {wrapped}'s "
                f"parameters, e.g. {table}.{INNER_PARAMS}.beta = 0.2"
            )
        if issubclass(aggregator_class(wrapped, f"{table}.{INNER}"), SERVER_SIDE_DP):
            raise ValueError(
                f"run-config key {table}.{INNER} = {wrapped!r} is a DP wrapper itself; allowed: a "
                "strategy that aggregates (FedAvg, FedTrimmedAvg, ...)"
            )
        if num_devices is None:
            raise TypeError(f"aggregator {setting!r} is built with num_devices")
        inner, record = build(
            wrapped, sub, num_devices, f"{table}.{INNER}", f"{table}.{INNER_PARAMS}"
        )
        extra = {INNER: inner, "num_sampled_clients": num_devices}
    arguments = constructor_arguments(
        cls, own, table=table, owner=owner, refused=refused,
        also_allowed=(INNER, INNER_PARAMS) if extra else (),
    )  # fmt: skip
    for name, value in arguments.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            interval, why = parameter_range(cls, name) or FINITE
            allowed = out_of_range(interval, value, num_devices)
            if allowed is not None:
                raise ValueError(
                    f"run-config key {table}.{kebab(name)} = {value!r} for {owner}; allowed: "
                    f"{allowed} ({why})"
                )
    try:
        built = cls(**arguments, **extra)
    except Exception as err:
        raise ValueError(
            f"run-config key {key!r} = {setting!r} with {table} = "
            f"{ {kebab(k): v for k, v in arguments.items()} } (num-devices = {num_devices}): "
            f"{type(err).__name__}: {first_line(err)}"
        ) from err
    need, why = minimum_uploads(built)
    if num_devices is not None and need > num_devices:
        raise ValueError(
            f"run-config key {key!r} = {setting!r} with {table} = {dict(params)!r}: {why}, more "
            f"than num-devices = {num_devices}; lower num-malicious-nodes or add devices"
        )
    values = with_defaults(cls, arguments, refused=REFUSED)
    resolved = {kebab(k): getattr(built, k, v) if v is None else v for k, v in values.items()}
    given = {kebab(k) for k in arguments}
    where = {k: DERIVED.get(k, "the class default") for k in resolved}
    return built, {
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "params": resolved,
        "from": where | {k: f"run-config key {table!r}" for k in given},
    } | ({INNER: record} if record is not None else {})


#: Class attribute in which a researcher's strategy names the attributes of its state.
DECLARED = "checkpoint_state"
#: Set by the scheduler before every round (a DP wrapper's n), so not state; state kept > 0.
SET_EACH_ROUND, POSITIVE = ("num_sampled_clients",), ("clipping_norm",)


def _numeric(value: object) -> bool:
    """None, a number (not a bool), numeric arrays, or containers of these: state, undeclared."""
    if isinstance(value, dict):
        return all(isinstance(k, str) for k in value) and _numeric(list(value.values()))
    if isinstance(value, list | tuple):
        return all(_numeric(v) for v in value)
    if isinstance(value, np.ndarray | np.generic):
        return value.dtype.kind in "biuf"
    return value is None or (
        isinstance(value, ArrayRecord | int | float) and not isinstance(value, bool)
    )


def state_names(aggregator: Strategy) -> list[str]:
    """Its :data:`DECLARED` names, else its held strategies and numeric non-parameters.

    A parameter is one of a constructor along the class's MRO. ValueError: a bad declaration.
    """
    cls = type(aggregator)
    declared = getattr(cls, DECLARED, None)
    if declared is None:
        inits = [vars(c)["__init__"] for c in cls.__mro__ if "__init__" in vars(c)]
        settings = {n for init in inits for n in inspect.signature(init).parameters}
        return [
            name
            for name, value in vars(aggregator).items()
            if isinstance(value, Strategy) or (name not in settings and _numeric(value))
        ]
    if not isinstance(declared, tuple | list) or not all(isinstance(n, str) for n in declared):
        raise ValueError(
            f"{cls.__name__}.{DECLARED} = {declared!r}; allowed: a tuple of the names of the "
            "attributes that make up its state, e.g. ('count',)"
        )
    return list(declared)


def minimum_uploads(aggregator: Strategy) -> tuple[int, str]:
    """The fewest uploads ``aggregator`` (or the strategy a DP wrapper wraps) combines, and why.

    Bulyan 4 f + 3 (El Mhamdi et al. 2018), Krum and MultiKrum 2 f + 3 (Blanchard et al. 2017),
    f = ``num_malicious_nodes``; any other 1.
    """
    aggregator = inner_strategy(aggregator)
    f, name = int(getattr(aggregator, "num_malicious_nodes", 0)), type(aggregator).__name__
    for cls, k in ((flower.Bulyan, 4), (flower.MultiKrum, 2)):
        if isinstance(aggregator, cls):
            return k * f + 3, f"{name} needs {k} f + 3 uploads, f = num-malicious-nodes = {f}"
    return 1, f"{name} needs one upload"


def make_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int | None = None
) -> Strategy | None:
    """A fresh aggregator for ``aggregator = setting``; None for the default FedAvg.

    A DP wrapper needs ``num_devices``. Raises ValueError (one line) for refused parameters.
    """
    if setting == "" and params:
        raise ValueError(
            f"run-config key {PARAMS_KEY} = {dict(params)!r} is set, but {AGGREGATOR_KEY!r} "
            'is "" (the scheduler\'s FedAvg takes no parameters); name an aggregator'
        )
    return None if setting == "" else build(setting, params, num_devices)[0]


def resolved_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int
) -> dict[str, object] | None:
    """``config.json``'s ``aggregator_resolved`` (None for the scheduler's FedAvg)."""
    if setting == "":
        return None
    with flower_log(logging.ERROR):  # logged when the run's aggregator was built
        return build(setting, params, num_devices)[1]


def inner_strategy(aggregator: Strategy) -> Strategy:
    """The strategy that aggregates: a DP wrapper's wrapped one, else ``aggregator`` itself."""
    return getattr(aggregator, INNER) if isinstance(aggregator, SERVER_SIDE_DP) else aggregator


def dp_round_noise(aggregator: object, uploads: int) -> tuple[float, float] | None:
    """The clipping norm C a round clips with and its noise's standard deviation z C / n.

    Read before the round (which moves the adaptive C); z is the wrapper's noise multiplier
    (the adaptive one's share for the updates, as Flower splits it), n = ``uploads``. None for
    an aggregator without DP.
    """
    if not isinstance(aggregator, SERVER_SIDE_DP):
        return None
    norm = float(aggregator.clipping_norm)
    return norm, float(aggregator.noise_multiplier) * norm / uploads


@contextlib.contextmanager
def flower_log(level: int) -> Iterator[None]:
    """Flower's log lines below ``level`` left out (they came with the check before)."""
    previous = FLOWER_LOGGER.level
    FLOWER_LOGGER.setLevel(max(previous, level))
    try:
        yield
    finally:
        FLOWER_LOGGER.setLevel(previous)
