"""From the run config's ``aggregator`` and ``aggregator-params`` to a Flower strategy.

``aggregator`` names a Flower Message-API strategy (a name of ``flwr.serverapp.strategy`` or an
import path); its parameters go through the check ``policy-params`` go through, then the ranges
of :mod:`~fedcgd_strategy.flower.aggregator_params` (docs/design.md, "Any Flower aggregation";
docs/aggregation.md, "Allowed values").
"""

from __future__ import annotations

from collections.abc import Mapping

from flwr.serverapp import strategy as flower_strategies
from flwr.serverapp.strategy import (
    Bulyan,
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    FedProx,
    MultiKrum,
    Strategy,
)

from fedcgd_strategy.flower.aggregator_params import check_ranges
from fedcgd_task.constructor_params import constructor_arguments, kebab, with_defaults
from fedcgd_task.imports import REFERENCE_FORMS, first_line, import_object, is_reference

#: Run-config key of the aggregator.
AGGREGATOR_KEY = "aggregator"
#: Run-config table of its constructor arguments.
PARAMS_KEY = "aggregator-params"
#: The default: the scheduler's own FedAvg (:func:`fedcgd_strategy.aggregation.fedavg`).
DEFAULT_AGGREGATOR = ""

#: Constructor parameters of Flower's strategies that steer their own node sampling, federated
#: evaluation and record keys: the scheduler owns these, so they are refused.
SCHEDULER_OWNS: dict[str, str] = {
    "fraction_train": "the scheduling policy chooses who trains",
    "fraction_evaluate": "the ServerApp evaluates centrally",
    "min_train_nodes": "the scheduling policy chooses who trains",
    "min_evaluate_nodes": "the ServerApp evaluates centrally",
    "min_available_nodes": "num-devices fixes the federation",
    "weighted_by_key": "uploads are weighted by |D_v| (num-examples)",
    "arrayrecord_key": "the replies handed to the aggregator are built by the scheduler",
    "configrecord_key": "the scheduler builds the training messages",
    "train_metrics_aggr_fn": "the round's metrics line is the scheduler's",
    "evaluate_metrics_aggr_fn": "the ServerApp evaluates centrally",
}
#: Strategies that change the clients' training, which this app's clients do not do.
CLIENT_SIDE: dict[type[Strategy], str] = {
    FedProx: "FedProx changes the clients' training (a proximal term its configure_train asks "
    "for), not the aggregation, which is FedAvg's",
    DifferentialPrivacyClientSideFixedClipping: "client-side clipping needs the clients' "
    "fixedclipping_mod; name DifferentialPrivacyServerSideFixedClipping (the server clips)",
    DifferentialPrivacyClientSideAdaptiveClipping: "client-side clipping needs the clients' "
    "adaptiveclipping_mod; name DifferentialPrivacyServerSideAdaptiveClipping (the server clips)",
}


def short_names() -> list[str]:
    """The Flower strategies an ``aggregator`` may name without a module path."""
    names = getattr(flower_strategies, "__all__", [])
    return [
        name
        for name in names
        if isinstance(getattr(flower_strategies, name, None), type)
        and issubclass(getattr(flower_strategies, name), Strategy)
        and name != "Strategy"
    ]


def aggregator_class(setting: str, key: str = AGGREGATOR_KEY) -> type[Strategy]:
    """The Flower strategy class ``aggregator = setting`` names (ValueError: one line)."""
    if is_reference(setting):
        found = import_object(setting, key)
    elif setting in short_names():
        found = getattr(flower_strategies, setting)
    else:
        default = '"" (the scheduler\'s FedAvg), ' if key == AGGREGATOR_KEY else ""
        raise ValueError(
            f"run-config key {key!r} = {setting!r}; allowed: {default}a Flower strategy "
            f"({', '.join(short_names())}) or a Strategy subclass as {REFERENCE_FORMS}"
        )
    if not (isinstance(found, type) and issubclass(found, Strategy)):
        raise ValueError(
            f"run-config key {key!r} = {setting!r} is {found!r}, not a subclass of "
            "flwr.serverapp.strategy.Strategy"
        )
    for refused, why in CLIENT_SIDE.items():
        if issubclass(found, refused):
            raise ValueError(
                f"run-config key {key!r} = {setting!r}: {why}; this app's clients do not "
                "apply it, so it is refused"
            )
    return found


def aggregator_arguments(
    setting: str,
    params: Mapping[str, object],
    key: str = AGGREGATOR_KEY,
    table: str = PARAMS_KEY,
    num_devices: int | None = None,
) -> dict[str, object]:
    """Check ``aggregator-params`` against the constructor of ``setting``; return the kwargs.

    Refused, each in one line naming ``aggregator-params.<name>``: a name the constructor does not
    take or the scheduler owns (:data:`SCHEDULER_OWNS`), a parameter a run config cannot hold, a
    value of another type or out of range (``num_devices`` for bounds that are the number of
    devices), two spellings of one name, a required parameter left unset. ``key`` and ``table``
    name the settings in the messages.
    """
    cls = aggregator_class(setting, key)
    refused = {name: f"not settable here ({why})" for name, why in SCHEDULER_OWNS.items()}
    owner = f"aggregator {setting!r}"
    arguments = constructor_arguments(cls, params, table=table, owner=owner, refused=refused)
    check_ranges(cls, arguments, table=table, owner=owner, num_devices=num_devices)
    return arguments


def build_strategy(
    setting: str, arguments: Mapping[str, object], key: str = AGGREGATOR_KEY
) -> Strategy:
    """A fresh strategy of the class ``setting`` names, built with the checked ``arguments``.

    ``arguments`` come from :func:`aggregator_arguments`; ``key`` is the run-config key of the
    class. Raises ValueError (one line) when the constructor raises.
    """
    try:
        return aggregator_class(setting, key)(**arguments)
    except Exception as err:
        raise ValueError(
            f"run-config key {key!r} = {setting!r}: building it with {arguments} "
            f"raised {type(err).__name__}: {first_line(err)}"
        ) from err


def class_path(cls: type) -> str:
    """``package.module:ClassName`` of ``cls``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def resolved_strategy(
    setting: str, params: Mapping[str, object], key: str = AGGREGATOR_KEY, table: str = PARAMS_KEY
) -> dict[str, object]:
    """``{"class": ..., "params": ...}``: the class ``setting`` names and every settable parameter.

    Given values and the constructor's defaults, kebab case: what the strategy is built with.
    """
    cls = aggregator_class(setting, key)
    arguments = aggregator_arguments(setting, params, key, table)
    resolved = with_defaults(cls, arguments, refused=SCHEDULER_OWNS)
    return {"class": class_path(cls), "params": {kebab(k): v for k, v in resolved.items()}}


def minimum_uploads(aggregator: Strategy) -> tuple[int, str]:
    """The fewest uploads ``aggregator`` can combine, and why (read from its class).

    Bulyan: 4 f + 3 (El Mhamdi et al. 2018; Flower's Bulyan returns nothing below it);
    Krum and MultiKrum: 2 f + 3 (Blanchard et al. 2017: n > 2 f + 2), f = its
    ``num_malicious_nodes``; every other strategy: 1.
    """
    f = int(getattr(aggregator, "num_malicious_nodes", 0))
    name = type(aggregator).__name__
    if isinstance(aggregator, Bulyan):
        return 4 * f + 3, f"{name} needs 4 f + 3 uploads, f = num-malicious-nodes = {f}"
    if isinstance(aggregator, MultiKrum):
        return 2 * f + 3, f"{name} needs 2 f + 3 uploads, f = num-malicious-nodes = {f}"
    return 1, f"{name} needs one upload"
