"""The allowed range of every numeric parameter of Flower's strategies and DP wrappers.

:data:`RANGES` holds, per Flower class, each numeric constructor parameter's range from Flower
1.42's docs and source or, where they give none, from the update rule (each entry's ``why``);
a class takes the ranges of the nearest class in its MRO that lists the parameter. Every value
must be finite; learning rates are at most :data:`MAX_LEARNING_RATE` (docs/aggregation.md,
"Allowed values"); MultiKrum's ``num-nodes-to-select`` at most ``num-devices``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from flwr.serverapp.strategy import Bulyan, FedAvgM, FedTrimmedAvg, MultiKrum, QFedAvg
from flwr.serverapp.strategy.dp_adaptive_clipping import DifferentialPrivacyAdaptiveBase
from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase
from flwr.serverapp.strategy.fedopt import FedOpt

from fedcgd_task.constructor_params import kebab

#: Largest learning rate of any kind: a step that moves every weight by up to 10 times the
#: update (FedAvgM, FedOpt: |m_t| / (sqrt(v_t) + tau) is about 1 per coordinate) or changes
#: the clipping norm by up to e^10 per round is no experiment; Flower's defaults are 0.01-1.
MAX_LEARNING_RATE = 10.0


@dataclass(frozen=True)
class Range:
    """The finite values from ``low`` to ``high`` (None: no bound; ``*_open``: end excluded).

    ``up_to_devices``: the upper bound is the run's ``num-devices``.
    """

    why: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    up_to_devices: bool = False

    def upper(self, num_devices: int | None) -> float | None:
        """The upper bound in a run of ``num_devices`` (None: unknown, not checked)."""
        return float(num_devices) if self.up_to_devices and num_devices else self.high

    def allows(self, value: float, num_devices: int | None = None) -> bool:
        """Whether ``value`` is finite and within the range."""
        high = self.upper(num_devices)
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return high is None or (value < high if self.high_open else value <= high)

    def text(self, *, integer: bool, num_devices: int | None = None) -> str:
        """``a number in [0, 1)``, ``an integer >= 0``, ``a finite number``, ..."""
        kind = "an integer" if integer else "a number"
        high = self.upper(num_devices)
        if self.low is None and high is None:
            return f"a finite {kind.removeprefix('a ').removeprefix('an ')}"
        if high is None:
            return f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{kind} {'<' if self.high_open else '<='} {high:g}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{kind} in {left}{self.low:g}, {high:g}{right}"


def positive(why: str) -> Range:
    """(0, inf)."""
    return Range(why, low=0.0, low_open=True)


def non_negative(why: str) -> Range:
    """[0, inf)."""
    return Range(why, low=0.0)


def learning_rate(why: str) -> Range:
    """(0, :data:`MAX_LEARNING_RATE`]."""
    return Range(why, low=0.0, high=MAX_LEARNING_RATE, low_open=True)


def decay(why: str) -> Range:
    """[0, 1): a factor that must forget (1 never does)."""
    return Range(why, low=0.0, high=1.0, high_open=True)


#: A float parameter no table lists (a researcher's own): finite.
FINITE = Range("NaN and inf are no setting")

#: Flower class -> its numeric constructor parameters -> their range.
RANGES: dict[type, dict[str, Range]] = {
    FedOpt: {
        "eta": learning_rate("the server's step; FedOpt's docs: server-side learning rate"),
        "eta_l": learning_rate("the clients' learning rate, which Flower's FedOpt only logs; "
                               "this app's clients train with run-config learning-rate"),
        "beta_1": decay("first-moment decay; FedAdam divides by 1 - beta_1^t"),
        "beta_2": decay("second-moment decay"),
        "tau": positive("the step divides by sqrt(v_t) + tau: FedOpt's adaptivity"),
    },
    FedAvgM: {
        "server_learning_rate": learning_rate("the server's step (1: FedAvg's)"),
        "server_momentum": decay("momentum: 1 never forgets an update; Hsu et al. 2019 "
                                 "use beta < 1"),
    },
    FedTrimmedAvg: {
        "beta": Range("fraction cut at each end; FedTrimmedAvg's docs: [0, 0.5)", low=0.0,
                      high=0.5, high_open=True),
    },
    MultiKrum: {
        "num_malicious_nodes": non_negative("f, the attackers assumed; Krum needs 2 f + 3 "
                                            "uploads"),
        "num_nodes_to_select": Range("the uploads averaged, 1 is Krum; more than the "
                                     "devices would be all of them, FedAvg", low=1.0,
                                     up_to_devices=True),
    },
    Bulyan: {
        "num_malicious_nodes": non_negative("f, the attackers assumed; Bulyan needs 4 f + 3 "
                                            "uploads"),
    },
    QFedAvg: {
        "client_learning_rate": learning_rate("QFedAvg's Lipschitz estimate is its inverse"),
        "q": non_negative("fairness; q = 0 is FedAvg, QFedAvg's docs"),
    },
    DifferentialPrivacyFixedClippingBase: {
        "noise_multiplier": non_negative("z; Flower: non-negative"),
        "clipping_norm": positive("C; Flower: positive"),
    },
    DifferentialPrivacyAdaptiveBase: {
        "noise_multiplier": non_negative("z; Flower: non-negative"),
        "initial_clipping_norm": positive("C_0; Flower: positive"),
        "target_clipped_quantile": Range("the fraction of updates to clip; Flower: [0, 1]",
                                         low=0.0, high=1.0),
        "clip_norm_lr": learning_rate("C changes by up to e^lr per round; Andrew et al. "
                                      "2019: 0.2"),
        "clipped_count_stddev": non_negative("noise of the clipped count; Flower: "
                                             "non-negative"),
    },
}  # fmt: skip


def parameter_range(cls: type, name: str) -> Range | None:
    """The range of ``cls``'s parameter ``name``: the nearest class in its MRO that lists it."""
    for base in cls.__mro__:
        if name in RANGES.get(base, {}):
            return RANGES[base][name]
    return None


def check_ranges(
    cls: type,
    arguments: Mapping[str, object],
    *,
    table: str,
    owner: str,
    num_devices: int | None = None,
) -> None:
    """Refuse a numeric argument of ``cls`` outside its range (:func:`parameter_range`).

    ``arguments`` are already checked for names and types; ``table`` and ``owner`` name the
    setting, ``num_devices`` serves bounds that are the number of devices. Raises ValueError (one
    line naming ``<table>.<name>``, the value and the allowed range).
    """
    for name, value in arguments.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        allowed = parameter_range(cls, name)
        if allowed is None and isinstance(value, float):
            allowed = FINITE
        if allowed is None or allowed.allows(value, num_devices):
            continue
        text = allowed.text(integer=isinstance(value, int), num_devices=num_devices)
        raise ValueError(
            f"run-config key {table}.{kebab(name)} = {value!r} for {owner}; allowed: {text} "
            f"({allowed.why})"
        )
