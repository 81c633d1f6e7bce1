"""Flower strategies aggregating the scheduled uploads (``aggregator``; docs/aggregation.md)."""

from __future__ import annotations

import copy
import gc
import inspect
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp import strategy as flower
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.fedopt import FedOpt
from numpy.typing import NDArray

from fedcgd_config import keys
from fedcgd_config.imports import REFERENCE_FORMS, first_line, import_object, is_reference
from fedcgd_strategy.aggregation import array_problem, cast_like, non_finite_arrays
from fedcgd_strategy.constructor_params import (
    constructor_arguments,
    kebab,
    keyword_parameters,
    scalar_type,
)

Arrays = Mapping[str, NDArray[np.generic]]
Model = dict[str, NDArray[np.generic]]
AGGREGATOR_KEY, PARAMS_KEY = "aggregator", "aggregator-params"
#: A DP wrapper's parameters naming the strategy it wraps (default FedAvg) and its table.
INNER, INNER_PARAMS = "strategy", "strategy-params"
NOISE_STREAM = 0x4E4F4953  #: tag of the noise's seed (with the run seed and the round): "NOIS"
#: Constructor parameters ``aggregator-params`` may not set, and why.
REFUSED = dict.fromkeys(
    inspect.signature(flower.FedAvg).parameters,
    "the scheduler's: the policy chooses who trains, the ServerApp evaluates, uploads are "
    "weighted by |D_v|",
) | {"num_sampled_clients": "set every round to the round's number of uploads n (the noise's "
     "standard deviation is z C / n)", "accountant": "Flower's privacy accountant is an object "
     "a run config cannot hold"}  # fmt: skip
#: Strategies that change the clients' training, which this app's clients do not do.
CLIENT_SIDE: dict[type, str] = {
    flower.FedProx: "FedProx changes the clients' training (a proximal term), not the aggregation",
    **{getattr(flower, f"DifferentialPrivacyClientSide{k}Clipping"): f"client-side clipping "
       f"needs the clients' {k.lower()}clipping_mod; name DifferentialPrivacyServerSide{k}Clipping"
       for k in ("Fixed", "Adaptive")},
}  # fmt: skip
SERVER_SIDE_DP = (flower.DifferentialPrivacyServerSideFixedClipping,
                  flower.DifferentialPrivacyServerSideAdaptiveClipping)  # fmt: skip
#: Flower's strategies' state (nearest class on the MRO): attribute -> arrays by the model's
#: names (``dict``, ``record``), in its order (``list``), or a number > 0 (``norm``).
FLOWER_STATE: dict[type, dict[str, str]] = {
    FedOpt: {"m_t": "dict", "v_t": "dict"},
    flower.FedAvgM: {"current_arrays": "record", "momentum_vector": "list"},
    flower.DifferentialPrivacyServerSideAdaptiveClipping: {"clipping_norm": "norm"},
}


class DifferentialPrivacyServerSideAdaptiveClipping(
    flower.DifferentialPrivacyServerSideAdaptiveClipping
):
    """Flower's adaptive clipping as Andrew et al. 2019 (arXiv:1905.03871), Algorithm 1: the
    round's noise from the norm C it clipped with, then C <- C exp(-lr (b - gamma)), b = 1 -
    ``clipped_fraction``, gamma = 1 - ``target_clipped_quantile``, lr = ``clip_norm_lr``."""  # noqa: D205, D209

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's, C updated after the noise is added."""
        self._clipped_fractions: list[float] = []
        try:
            return super().aggregate_train(server_round, replies)
        finally:
            for fraction in self._clipped_fractions:
                b, gamma = 1.0 - fraction, 1.0 - self.target_clipped_quantile
                self.clipping_norm *= math.exp(-self.clip_norm_lr * (b - gamma))
            del self._clipped_fractions

    def _geometric_update(self, clipped_fraction: float) -> None:
        """Flower's update of C (of the wrong sign, before the noise): held for the above."""
        self._clipped_fractions.append(clipped_fraction)


def aggregator_class(setting: str, key: str = AGGREGATOR_KEY) -> type[Strategy]:
    """The strategy class ``setting`` names, ours for Flower's adaptive DP (ValueError: 1 line)."""
    names = [
        n for n in flower.__all__ if n != "Strategy" and issubclass(getattr(flower, n), Strategy)
    ]
    if not (is_reference(setting) or setting in names):
        default = '"" (the scheduler\'s FedAvg), ' if key == AGGREGATOR_KEY else ""
        raise ValueError(
            f"run-config key {key!r} = {setting!r}; allowed: {default}a Flower strategy "
            f"({', '.join(names)}) or a Strategy subclass as {REFERENCE_FORMS}"
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


def make_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int, key: str = AGGREGATOR_KEY,
    table: str = PARAMS_KEY,
) -> tuple[Strategy | None, dict[str, Any] | None]:  # fmt: skip
    """The strategy ``setting`` names, built from ``table``, and ``config.json``'s
    ``aggregator_resolved``; (None, None) for ``""``, the scheduler's FedAvg."""  # noqa: D205, D209
    if setting == "" and key == AGGREGATOR_KEY:
        if params:
            raise ValueError(f"run-config key {PARAMS_KEY} = {dict(params)!r} is set, but "
                             f"{AGGREGATOR_KEY!r} is \"\" (the scheduler's FedAvg takes no "
                             "parameters); name an aggregator")  # fmt: skip
        return None, None
    cls, own, extra, record = aggregator_class(setting, key), dict(params), {}, None
    if issubclass(cls, SERVER_SIDE_DP):
        wrapped, sub = own.pop(INNER, "FedAvg"), own.pop(INNER_PARAMS, {})
        ok = isinstance(wrapped, str) and isinstance(sub, dict)
        if not ok or issubclass(aggregator_class(str(wrapped), f"{table}.{INNER}"), SERVER_SIDE_DP):
            raise ValueError(
                f"run-config key {table}.{INNER} = {wrapped!r} with {table}.{INNER_PARAMS} = "
                f"{sub!r}; allowed: a strategy that aggregates (FedAvg, FedTrimmedAvg, ...) and "
                f"a table of its parameters, e.g. {table}.{INNER_PARAMS}.beta = 0.2"
            )
        inner, record = make_aggregator(str(wrapped), cast(dict, sub), num_devices,
                                        f"{table}.{INNER}", f"{table}.{INNER_PARAMS}")  # fmt: skip
        extra = {INNER: inner, "num_sampled_clients": num_devices}
    refused = {n: f"not settable here ({why})" for n, why in REFUSED.items()}
    refused |= {INNER: f"{table}.{INNER} names it"} if extra else {}
    arguments = constructor_arguments(
        cls, own, table=table, owner=f"aggregator {setting!r}", refused=refused,
        also_allowed=(INNER, INNER_PARAMS) if extra else (),
    )  # fmt: skip
    shown = {kebab(k): v for k, v in arguments.items()}
    try:
        if not all(math.isfinite(v) for v in arguments.values() if isinstance(v, float)):
            raise ValueError("NaN and inf are no setting; allowed: finite numbers")
        built = cls(**arguments, **extra)
        need, why = minimum_uploads(built)
        if need > num_devices:
            raise ValueError(f"{why}, more than num-devices = {num_devices}")
    except Exception as err:
        raise ValueError(
            f"run-config key {key!r} = {setting!r} with {table} = {shown} (num-devices = "
            f"{num_devices}): {type(err).__name__}: {first_line(err)}"
        ) from err
    values = {
        n: arguments.get(n, p.default)
        for n, p in keyword_parameters(cls).items()
        if n in arguments
        or (n not in REFUSED and p.default is not p.empty and scalar_type(cls, p) is not None)
    }
    return built, {
        "class": f"{cls.__module__}:{cls.__qualname__}",
        "params": {kebab(k): getattr(built, k, v) if v is None else v for k, v in values.items()},
        "from": {kebab(k): f"run-config key {table!r}" if kebab(k) in shown else
                 "Flower's default for num-devices (V / 20)" if k == "clipped_count_stddev"
                 else "the class default" for k in values},
    } | ({INNER: record} if record is not None else {})  # fmt: skip


def minimum_uploads(aggregator: Strategy) -> tuple[int, str]:
    """The fewest uploads ``aggregator`` combines, and why: with f = ``num_malicious_nodes``,
    Bulyan 4 f + 3 (El Mhamdi et al. 2018), (Multi)Krum 2 f + 3."""  # noqa: D205, D209
    aggregator = _inner(aggregator)
    f, name = int(getattr(aggregator, "num_malicious_nodes", 0)), type(aggregator).__name__
    for cls, k in ((flower.Bulyan, 4), (flower.MultiKrum, 2)):
        if isinstance(aggregator, cls):
            return k * f + 3, f"{name} needs {k} f + 3 uploads, f = num-malicious-nodes = {f}"
    return 1, f"{name} needs one upload"


def _inner(aggregator: Strategy) -> Strategy:
    """The strategy that aggregates: a DP wrapper's wrapped one, else ``aggregator`` itself."""
    return getattr(aggregator, INNER) if isinstance(aggregator, SERVER_SIDE_DP) else aggregator


def dp_round_noise(aggregator: object, uploads: int) -> tuple[float, float] | None:
    """The norm C a round clips with and the noise's std z C / n (None without DP)."""
    if not isinstance(aggregator, SERVER_SIDE_DP):
        return None
    norm = float(aggregator.clipping_norm)
    return norm, float(aggregator.noise_multiplier) * norm / uploads


def noise_seed(seed: int, server_round: int) -> NDArray[np.uint32]:
    """The seed of numpy's global generator for round ``server_round`` of run ``seed``."""
    state = np.random.SeedSequence([seed, NOISE_STREAM, server_round]).generate_state(8)
    return state.astype(np.uint32)


def array_record(arrays: Arrays) -> ArrayRecord:
    """``arrays`` as Flower's record (C-contiguous copies where needed)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def aggregate_uploads(
    aggregator: Strategy, server_round: int, models: Sequence[Arrays], weights: Sequence[int],
    reference: Arrays, node_ids: Sequence[int] | None = None, *, seed: int = 0,
) -> tuple[Model | None, str | None]:  # fmt: skip
    """Combine the validated ``models`` (weights |D_v|; DP: 1) with ``aggregator.aggregate_train``:
    the new model and None, or None and why (the aggregator's state then put back)."""  # noqa: D205, D209
    name, inner = type(aggregator).__name__, _inner(aggregator)
    need, why = minimum_uploads(aggregator)
    if len(models) < need:
        return None, f"too few uploads for {name}: {len(models)} < {need} ({why})"
    before = copy.deepcopy(aggregator_state(aggregator))  # as a checkpoint holds it
    wanted = (getattr(inner, k, 0) or 0 for k in ("min_available_nodes", "min_train_nodes"))
    ids, current = list(range(1, max(len(models), *map(int, wanted)) + 1)), reference
    grid = cast(Grid, SimpleNamespace(get_node_ids=lambda: ids))  # all configure_train reads
    if isinstance(aggregator, SERVER_SIDE_DP):
        floats = [{k: np.asarray(v, np.float64 if v.dtype.kind in "biu" else None)
                   for k, v in m.items()} for m in [*models, reference]]  # fmt: skip
        models, weights, current = floats[:-1], [1] * len(models), floats[-1]
        aggregator.num_sampled_clients = len(models)
    arrays_key = str(getattr(inner, "arrayrecord_key", keys.ARRAYS))
    weight_key = str(getattr(inner, "weighted_by_key", keys.NUM_EXAMPLES))
    saved = np.random.get_state()  # noqa: NPY002  (DP noise: seeded; Bulyan's gc.collect())
    np.random.seed(noise_seed(seed, server_round))  # noqa: NPY002
    gc.freeze()
    try:
        list(aggregator.configure_train(server_round, array_record(current), ConfigRecord(), grid))
        replies = [
            Message(
                RecordDict({arrays_key: array_record(model),
                            keys.METRICS: MetricRecord({weight_key: int(weight)})}),
                reply_to=Message(RecordDict(), dst_node_id=int(node), group_id=str(server_round),
                                 message_type="train"),
            )
            for model, weight, node in zip(models, weights, node_ids or ids, strict=False)
        ]  # fmt: skip
        record, _ = aggregator.aggregate_train(server_round, replies)
        result, reason = _fitted(record, reference, name, len(models))
    except Exception as err:  # a strategy's failure costs the round, never the run
        result, reason = None, f"{name}.aggregate_train raised {type(err).__name__}: " + (
            first_line(err))  # fmt: skip
    finally:
        gc.unfreeze()
        np.random.set_state(saved)  # noqa: NPY002
    if result is None:
        _restore(aggregator, before)
    return result, reason


def _restore(aggregator: Strategy, state: dict[str, Any]) -> None:
    """Put back what :func:`aggregator_state` took (this process's own: unchecked)."""
    if hasattr(aggregator, "load_state_dict"):
        return aggregator.load_state_dict(state)
    for key, (owner, name, kind) in _attributes(aggregator).items():
        record = kind == "record" and state[key] is not None
        setattr(owner, name, array_record(state[key]) if record else state[key])


def _fitted(
    record: ArrayRecord | None, reference: Arrays, name: str, count: int
) -> tuple[Model | None, str | None]:
    """``record`` as the reference's arrays, in its dtypes; or None and why it does not fit."""
    if record is None:
        return None, f"{name}.aggregate_train returned no model from {count} uploads"
    out = {k: v.numpy() for k, v in record.items()}
    shapes = {k: np.shape(v) for k, v in out.items()}
    if shapes != {k: np.shape(v) for k, v in reference.items()}:
        return None, f"{name}'s aggregate is not the model's arrays: {list(shapes.items())[:3]}"
    out = cast_like(out, reference)
    if bad := non_finite_arrays(out):
        return None, f"the {name} aggregate of {count} uploads is not finite in {bad[:3]}"
    return out, None


def _attributes(aggregator: Strategy) -> dict[str, tuple[Strategy, str, str]]:
    """Checkpoint key -> (owner, attribute, kind) of :data:`FLOWER_STATE` (``strategy.*``: DP's)."""
    inner = _inner(aggregator)
    owners = {"": aggregator} | ({f"{INNER}.": inner} if inner is not aggregator else {})
    found = {p: next((FLOWER_STATE[c] for c in type(o).__mro__ if c in FLOWER_STATE), {})
             for p, o in owners.items()}  # fmt: skip
    return {p + n: (owners[p], n, kind) for p, kinds in found.items() for n, kind in kinds.items()}


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """What a checkpoint holds: ``state_dict()``, else :data:`FLOWER_STATE`, arrays copied."""
    if aggregator is None or hasattr(aggregator, "load_state_dict"):
        return {} if aggregator is None else dict(aggregator.state_dict())  # type: ignore[attr-defined]

    def copied(value: Any) -> Any:
        if isinstance(value, ArrayRecord | dict):
            return {k: np.array(v.numpy() if isinstance(v, Array) else v) for k, v in value.items()}
        return [np.array(v) for v in value] if isinstance(value, list) else value

    return {key: copied(getattr(o, name)) for key, (o, name, _) in _attributes(aggregator).items()}


def load_aggregator_state(
    aggregator: Strategy | None, state: Mapping[str, Any], model: Arrays
) -> None:
    """Check ``state`` (a checkpoint's, untrusted) against ``model``, then set it; ValueError."""
    own = hasattr(aggregator, "load_state_dict")
    attributes = {} if aggregator is None or own else _attributes(aggregator)
    keys_kept = sorted(aggregator.state_dict() if own else attributes)  # type: ignore[union-attr]
    if sorted(state) != keys_kept:
        what = f"the run's {type(aggregator).__name__}" if aggregator else (
            "the run's 'aggregator' is the default FedAvg, which")  # fmt: skip
        raise ValueError(f"the aggregator state holds {sorted(state)}; {what} keeps {keys_kept}")
    if own:
        aggregator.load_state_dict(state)  # type: ignore[union-attr]
    fitted = {key: _fit(state[key], kind, model, key) for key, (_, _, kind) in attributes.items()}
    for key, (owner, name, _) in attributes.items():
        setattr(owner, name, fitted[key])


def _fit(value: Any, kind: str, model: Arrays, where: str) -> Any:
    """``value`` as the attribute of ``kind`` holds it; ValueError naming ``where`` if unfit."""
    refusal = f"the aggregator state's {where}"
    if kind == "norm":
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not (number and 0 < value <= sys.float_info.max):  # exact for ints beyond floats too
            raise ValueError(f"{refusal} = {value!r}; allowed: a finite number > 0")
        return value
    if value is None:  # before the first round
        return None
    by_name = dict(zip(model, value, strict=False)) if isinstance(value, list) else value
    if not isinstance(value, list if kind == "list" else dict) or len(value) != len(model):
        raise ValueError(f"{refusal} is not {len(model)} arrays, one per array of the model")
    if set(by_name) != set(model):
        raise ValueError(f"{refusal} has other keys than the model's: {sorted(by_name)[:3]}")
    for key, ref in model.items():
        if problem := array_problem(by_name[key], ref, same_dtype=False):
            raise ValueError(f"{refusal}[{key!r}] {problem}")
    out = {key: np.array(by_name[key]) for key in model}
    return list(out.values()) if kind == "list" else array_record(out) if kind == "record" else out
