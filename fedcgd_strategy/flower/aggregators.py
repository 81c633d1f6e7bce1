"""Flower strategies as aggregators of the scheduled uploads (run-config ``aggregator``).

``""`` keeps the scheduler's FedAvg (:func:`fedcgd_strategy.aggregation.fedavg`); a named
strategy's own ``aggregate_train`` combines the round's validated uploads. How it is named,
checked (:data:`RANGES`), built, driven behind the scheduler and wrapped for server-side DP:
docs/design.md, "Any Flower aggregation" and "Server-side differential privacy"; the ranges and
``aggregator_resolved``: docs/aggregation.md, "Allowed values". Its state: aggregator_state.py.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import strategy as flower
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.dp_adaptive_clipping import DifferentialPrivacyAdaptiveBase
from flwr.serverapp.strategy.dp_fixed_clipping import DifferentialPrivacyFixedClippingBase
from flwr.serverapp.strategy.fedopt import FedOpt
from flwr.supercore.logger import FLOWER_LOGGER
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import non_finite_arrays
from fedcgd_strategy.flower.aggregator_state import (
    DECLARED,
    aggregator_state,
    fingerprint,
    set_state,
    unsaved_changes,
)
from fedcgd_strategy.flower.local_grid import LocalGrid
from fedcgd_task import keys
from fedcgd_task.array_codec import array_record, numpy_arrays
from fedcgd_task.constructor_params import constructor_arguments, kebab, with_defaults
from fedcgd_task.imports import REFERENCE_FORMS, first_line, import_object, is_reference

Arrays = Mapping[str, NDArray[np.generic]]
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
#: Stream tag of the noise's seed (mixed with the run seed and the round): "NOIS".
NOISE_STREAM = 0x4E4F4953


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


#: Classes built in place of the one named.
REPLACED: dict[type, type] = {
    flower.DifferentialPrivacyServerSideAdaptiveClipping: (
        DifferentialPrivacyServerSideAdaptiveClipping
    )
}


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
    """The strategy class ``setting`` names (ValueError: one line; :data:`REPLACED` applied)."""
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
    return REPLACED.get(found, found)


def _given(params: Mapping[str, object], name: str, table: str, default: object) -> object:
    """``params``' value of ``name`` in either spelling (ValueError: given twice)."""
    found = [k for k in params if kebab(k) == name]
    if len(found) > 1:
        raise ValueError(f"run-config key {table}.{found[1]} names {table}.{found[0]} again; "
                         "give it once")  # fmt: skip
    return params[found[0]] if found else default


def _built(
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
        inner, record = _built(
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
    values = with_defaults(cls, arguments, refused=REFUSED)
    resolved = {kebab(k): getattr(built, k, v) if v is None else v for k, v in values.items()}
    given = {kebab(k) for k in arguments}
    where = {k: DERIVED.get(k, "the class default") for k in resolved}
    return built, {
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "params": resolved,
        "from": where | {k: f"run-config key {table!r}" for k in given},
    } | ({INNER: record} if record is not None else {})


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
    return None if setting == "" else _built(setting, params, num_devices)[0]


def resolved_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int
) -> dict[str, object] | None:
    """``config.json``'s ``aggregator_resolved`` (None for the scheduler's FedAvg)."""
    if setting == "":
        return None
    with _flower_log(logging.ERROR):  # logged when the run's aggregator was built
        return _built(setting, params, num_devices)[1]


def minimum_uploads(aggregator: Strategy) -> tuple[int, str]:
    """The fewest uploads ``aggregator`` combines, and why.

    Bulyan 4 f + 3 (El Mhamdi et al. 2018), Krum and MultiKrum 2 f + 3 (Blanchard et al. 2017),
    f = ``num_malicious_nodes``; any other 1.
    """
    f, name = int(getattr(aggregator, "num_malicious_nodes", 0)), type(aggregator).__name__
    for cls, k in ((flower.Bulyan, 4), (flower.MultiKrum, 2)):
        if isinstance(aggregator, cls):
            return k * f + 3, f"{name} needs {k} f + 3 uploads, f = num-malicious-nodes = {f}"
    return 1, f"{name} needs one upload"


def is_dp(aggregator: object) -> bool:
    """True for an instance of Flower's server-side DP wrappers."""
    return isinstance(aggregator, SERVER_SIDE_DP)


def inner_strategy(aggregator: Strategy) -> Strategy:
    """The strategy that aggregates: a DP wrapper's wrapped one, else ``aggregator`` itself."""
    return getattr(aggregator, INNER) if is_dp(aggregator) else aggregator


class StandInGrid(LocalGrid):
    """What an aggregator's own ``configure_train`` sees: ``num_nodes`` node ids to list.

    Sending is refused; a strategy waiting for more nodes is stopped after
    :attr:`MAX_LISTINGS` listings instead of hanging.
    """

    MAX_LISTINGS = 10
    refusal = "the aggregator's configure_train may only list node ids, not send messages"

    def __init__(self, num_nodes: int) -> None:
        self.node_ids, self.listings = list(range(1, num_nodes + 1)), 0

    def get_node_ids(self) -> Iterable[int]:
        """The stand-in node ids (refused after :attr:`MAX_LISTINGS` calls in one round)."""
        self.listings += 1
        if self.listings > self.MAX_LISTINGS:
            raise RuntimeError(
                f"the aggregator's configure_train waits for more than {len(self.node_ids)} "
                "nodes (its own sampling settings); it cannot run behind the scheduler"
            )
        return list(self.node_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Refused (the scheduler sends the round's messages)."""
        raise RuntimeError(self.refusal)


def noise_seed(seed: int, server_round: int) -> NDArray[np.uint32]:
    """The seed of numpy's global generator for round ``server_round`` of run ``seed``."""
    return (
        np.random.SeedSequence([seed, NOISE_STREAM, server_round])
        .generate_state(8)
        .astype(np.uint32)
    )


@contextlib.contextmanager
def _flower_call(seed: int, server_round: int) -> Iterator[None]:
    """Around a strategy's calls: numpy's global generator seeded, the heap frozen.

    The generator (Flower's DP noise) from (``seed``, ``server_round``); a placeholder task
    identity outside a ServerApp; :func:`gc.freeze` (Bulyan calls ``gc.collect()`` per reply).
    All restored after.
    """
    outside = TaskIdentity._run_id is None
    if outside:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 0, 0, 0
    saved = np.random.get_state()  # noqa: NPY002  (the generator Flower's wrappers draw from)
    np.random.seed(noise_seed(seed, server_round))  # noqa: NPY002
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        np.random.set_state(saved)  # noqa: NPY002
        if outside:
            TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None  # type: ignore[assignment]


def _record(arrays: Arrays) -> ArrayRecord:
    return array_record({k: np.ascontiguousarray(v) for k, v in arrays.items()})


def _floats(arrays: Arrays) -> dict[str, NDArray[np.generic]]:
    """Integer arrays as float64 (a DP wrapper clips in place)."""
    return {k: np.asarray(v, np.float64 if np.asarray(v).dtype.kind in "biu" else None)
            for k, v in arrays.items()}  # fmt: skip


def aggregate_uploads(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    reference: Arrays,
    node_ids: Sequence[int] | None = None,
    *,
    seed: int = 0,
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    """Combine the round's uploads with ``aggregator``'s own ``aggregate_train``.

    ``models``: the scheduled devices' validated models, ``weights`` their |D_v|, ``reference``
    this round's global model, ``node_ids`` the uploading nodes (default 1, 2, ...). A DP wrapper
    gets float uploads, every weight 1 and n = ``len(models)``. Returns the new global model in
    the reference's dtypes and None; or None and why the model is kept, the strategy's state as
    it was before the call.
    """
    name, inner = type(aggregator).__name__, inner_strategy(aggregator)
    need, why = minimum_uploads(inner)
    if len(models) < need:
        return None, f"too few uploads for {name}: {len(models)} < {need} ({why})"
    before = aggregator_state(aggregator)  # copies
    wanted = (getattr(inner, k, 0) or 0 for k in ("min_available_nodes", "min_train_nodes"))
    grid, current = StandInGrid(max(len(models), *map(int, wanted))), reference
    if is_dp(aggregator):
        models, weights, current = [_floats(m) for m in models], [1] * len(models), _floats(current)
        aggregator.num_sampled_clients = len(models)  # type: ignore[attr-defined]
    arrays_key = str(getattr(inner, "arrayrecord_key", keys.ARRAYS))
    weight_key = str(getattr(inner, "weighted_by_key", keys.NUM_EXAMPLES))
    try:
        with _flower_call(seed, server_round):
            list(aggregator.configure_train(server_round, _record(current), ConfigRecord(), grid))
            replies = [
                Message(
                    RecordDict({arrays_key: _record(model),
                                keys.METRICS: MetricRecord({weight_key: int(weight)})}),
                    reply_to=Message(RecordDict(), dst_node_id=int(node),
                                     group_id=str(server_round), message_type=MessageType.TRAIN),
                )
                for model, weight, node in zip(
                    models, weights, grid.node_ids if node_ids is None else node_ids, strict=False
                )
            ]  # fmt: skip
            record, _ = aggregator.aggregate_train(server_round, replies)
        result, reason = _fitted(record, reference, name, len(models))
    except Exception as err:  # a strategy's failure costs the round, never the run
        result = None
        reason = f"{name}.aggregate_train raised {type(err).__name__}: {first_line(err)}"
    if result is None:
        set_state(aggregator, before)
    return result, reason


def _fitted(
    record: ArrayRecord | None, reference: Arrays, name: str, count: int
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    """``record`` as the reference's arrays, in its dtypes; or None and why it does not fit."""
    if record is None:
        return None, f"{name}.aggregate_train returned no model from {count} uploads"
    out = numpy_arrays(record)
    if set(out) != set(reference):
        return None, f"{name}'s aggregate has arrays {sorted(out)[:3]}…, not the model's"
    for key, ref in reference.items():
        if out[key].shape != np.shape(ref):
            return None, f"{name}'s aggregate has array {key!r} of shape {out[key].shape}"
        dtype = np.asarray(ref).dtype
        with np.errstate(over="ignore", invalid="ignore"):
            value = np.rint(out[key]) if np.issubdtype(dtype, np.integer) else out[key]
            out[key] = np.asarray(value).astype(dtype)
    bad = non_finite_arrays(out)
    if bad:
        return None, f"the {name} aggregate of {count} uploads is not finite in {bad[:3]}"
    return {k: out[k] for k in reference}, None


def dp_round_noise(aggregator: object, uploads: int) -> tuple[float, float] | None:
    """The clipping norm C a round clips with and its noise's standard deviation z C / n.

    Read before the round (which moves the adaptive C); z is the wrapper's noise multiplier
    (the adaptive one's share for the updates, as Flower splits it), n = ``uploads``. None for
    an aggregator without DP.
    """
    if not is_dp(aggregator):
        return None
    norm = float(aggregator.clipping_norm)  # type: ignore[attr-defined]
    return norm, float(aggregator.noise_multiplier) * norm / uploads  # type: ignore[attr-defined]


def synthetic_uploads(count: int) -> tuple[dict[str, NDArray[np.float32]], list[Arrays]]:
    """A tiny global model and ``count`` distinct uploads of it (the check before the start)."""
    reference = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    return reference, [{k: v + np.float32(0.01 * (i + 1)) for k, v in reference.items()}
                       for i in range(count)]  # fmt: skip


def check_aggregator(setting: str, params: Mapping[str, object], num_devices: int) -> None:
    """Refuse, before the start, an aggregator that cannot work in this run.

    A fresh instance must take ``aggregator-params``, need no more than ``num_devices`` uploads,
    aggregate a synthetic round into a model, and change only state a checkpoint holds. Raises
    ValueError (one line naming the setting, the value and what is allowed).
    """
    aggregator = make_aggregator(setting, params, num_devices)
    if aggregator is None:
        return
    need, why = minimum_uploads(inner_strategy(aggregator))
    head = f"run-config key {AGGREGATOR_KEY!r} = {setting!r}"
    if need > num_devices:
        raise ValueError(
            f"{head} with {PARAMS_KEY} = {dict(params)!r}: {why}, more than num-devices = "
            f"{num_devices}; lower num-malicious-nodes or add devices"
        )
    reference, models = synthetic_uploads(max(need, 3))
    fresh = fingerprint(aggregator)
    try:  # a state attribute that holds no data is refused, fresh or after the round
        with _flower_log(logging.WARNING):  # the probe's INFO lines are noise
            result, reason = aggregate_uploads(aggregator, 1, models, [1] * len(models), reference)
        if result is not None:
            aggregator_state(aggregator)
        changed = unsaved_changes(aggregator, fresh, type(aggregator).__name__)
    except ValueError as err:
        raise ValueError(f"{head}: {err}") from err
    if result is None:
        raise ValueError(
            f"{head} cannot aggregate the scheduler's uploads (probed on {len(models)} synthetic "
            f"uploads: {reason})"
        )
    if changed:
        raise ValueError(
            f"{head}: its round changes {', '.join(changed)}, which a checkpoint would not hold "
            "(a resumed run would differ); name every attribute of its state in a class "
            f"attribute {DECLARED} = (...)"
        )


@contextlib.contextmanager
def _flower_log(level: int) -> Iterator[None]:
    """Flower's log lines below ``level`` left out (they came with the check before)."""
    previous = FLOWER_LOGGER.level
    FLOWER_LOGGER.setLevel(max(previous, level))
    try:
        yield
    finally:
        FLOWER_LOGGER.setLevel(previous)
