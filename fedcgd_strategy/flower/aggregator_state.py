"""An aggregator's state for checkpoints: what changes as a run goes, never what was configured.

A checkpoint holds and a resume restores only the attributes in :data:`STATE_ATTRIBUTES` (or a
researcher's :data:`DECLARED` names); the settings in effect are always the run config's
(docs/design.md, "Any Flower aggregation", State). Values are numbers, strings and tagged numpy
arrays, so that ``torch.load(..., weights_only=True)`` reads them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedYogi,
    QFedAvg,
    Strategy,
)
from numpy.typing import NDArray

from fedcgd_strategy.flower.aggregator_registry import AGGREGATOR_KEY
from fedcgd_task.nested import DESCEND, map_nested

#: Tags of the values :func:`aggregator_state` writes that are not plain Python data.
ARRAY_TAG, SCALAR_TAG, RECORD_TAG = "__ndarray__", "__numpy_scalar__", "__arrayrecord__"
#: Tag of the state of a strategy held by the aggregator (a DP wrapper's inner strategy).
STRATEGY_TAG = "__strategy__"
#: Class attribute in which a researcher's strategy names the attributes of its state.
DECLARED = "checkpoint_state"

#: Kinds of state attribute, each checked on resume: ``MODEL`` arrays that mirror the global
#: model (None or empty before the first round; a dict or ArrayRecord with the model's keys, or
#: a list in the model's order; each array of the model's shape, of its dtype where the model's
#: is floating, finite); ``POSITIVE`` a finite number > 0; ``HELD`` the state of a held
#: strategy; ``PLAIN`` any plain data (a researcher's declared state).
MODEL, POSITIVE, HELD, PLAIN = "model arrays", "a finite number > 0", "held strategy", "data"

#: The state attributes of Flower 1.42's strategies (what their rounds assign), by class; a
#: subclass inherits its nearest ancestor's entry.
STATE_ATTRIBUTES: dict[type, dict[str, str]] = {
    Strategy: {},
    FedAvgM: {"current_arrays": MODEL, "momentum_vector": MODEL},
    FedAdam: {"current_arrays": MODEL, "m_t": MODEL, "v_t": MODEL},
    FedYogi: {"current_arrays": MODEL, "m_t": MODEL, "v_t": MODEL},
    FedAdagrad: {"current_arrays": MODEL, "m_t": MODEL, "v_t": MODEL},
    QFedAvg: {"current_arrays": MODEL},
    DifferentialPrivacyServerSideFixedClipping: {"current_arrays": MODEL, "strategy": HELD},
    DifferentialPrivacyServerSideAdaptiveClipping: {
        "current_arrays": MODEL,
        "clipping_norm": POSITIVE,
        "strategy": HELD,
    },
}
#: Attributes the scheduler sets itself before every round (a DP wrapper's
#: ``num_sampled_clients``: the round's number of uploads), so not state.
SET_EACH_ROUND = ("num_sampled_clients",)


def state_attributes(cls: type[Strategy]) -> dict[str, str]:
    """The attributes of ``cls``'s state and their kinds (:data:`STATE_ATTRIBUTES`).

    A class declaring :data:`DECLARED` has exactly those names, each of the kind its nearest Flower
    ancestor gives it (:data:`PLAIN` otherwise); a declaration that is not a tuple of names raises
    ValueError.
    """
    kinds = next((STATE_ATTRIBUTES[k] for k in cls.__mro__ if k in STATE_ATTRIBUTES), {})
    declared = getattr(cls, DECLARED, None)
    if declared is None:
        return dict(kinds)
    if not isinstance(declared, tuple | list) or not all(isinstance(n, str) for n in declared):
        raise ValueError(
            f"{cls.__name__}.{DECLARED} = {declared!r}; allowed: a tuple of the names of the "
            "attributes that make up its state, e.g. ('count',)"
        )
    return {name: kinds.get(name, PLAIN) for name in declared}


def _plain(value: object) -> tuple[bool, object]:
    """(True, a copy of ``value`` in plain data and numpy arrays), or (False, None) for non-data."""
    if value is None or isinstance(value, bool | int | float | str):
        return True, value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return True, {ARRAY_TAG: value.copy()}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return True, {SCALAR_TAG: np.asarray(value).copy()}
    if isinstance(value, ArrayRecord):
        return True, {RECORD_TAG: {k: v.numpy() for k, v in value.items()}}
    if isinstance(value, Strategy):
        return True, {STRATEGY_TAG: snapshot(value)}
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        if all(ok for ok, _ in items):
            out = [v for _, v in items]
            return True, out if isinstance(value, list) else tuple(out)
        return False, None
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        pairs = {k: _plain(v) for k, v in value.items()}
        if all(ok for ok, _ in pairs.values()):
            return True, {k: v for k, (_, v) in pairs.items()}
    return False, None


def _restored(value: object) -> object:
    """The inverse of :func:`_plain` (a nested strategy's state is left to the loader)."""
    return map_nested(value, _untagged)


def _untagged(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {ARRAY_TAG}:
            return np.array(value[ARRAY_TAG])
        if set(value) == {SCALAR_TAG}:
            return np.asarray(value[SCALAR_TAG])[()]
        if set(value) == {RECORD_TAG}:
            arrays = value[RECORD_TAG]
            return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})
    return DESCEND


def snapshot(aggregator: Strategy) -> dict[str, Any]:
    """Every attribute of ``aggregator`` that is data, copied (for :func:`restore_snapshot`).

    Data: None, bool, int, float, str, numeric numpy arrays and scalars, ArrayRecords, held
    strategies (nested) and lists, tuples and str-keyed dicts of these.
    """
    state = {}
    for name, value in vars(aggregator).items():
        ok, plain = _plain(value)
        if ok:
            state[name] = plain
    return state


def restore_snapshot(aggregator: Strategy, saved: Mapping[str, Any]) -> None:
    """Set the attributes :func:`snapshot` copied back on ``aggregator`` (and its held ones)."""
    for name, value in saved.items():
        if isinstance(value, dict) and set(value) == {STRATEGY_TAG}:
            restore_snapshot(getattr(aggregator, name), value[STRATEGY_TAG])
        else:
            setattr(aggregator, name, _restored(value))


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """The aggregator's state (:func:`state_attributes` of its class) as plain data.

    ``{}`` for the default FedAvg (None).

    Raises
    ------
    ValueError
        A state attribute that is not data (a researcher's declaration naming an object).
    """
    if aggregator is None:
        return {}
    cls = type(aggregator)
    state: dict[str, Any] = {}
    for name in state_attributes(cls):
        if name not in vars(aggregator):
            raise ValueError(f"{cls.__name__} has no attribute {name!r} (named as its state)")
        value = getattr(aggregator, name)
        if isinstance(value, Strategy):  # a held strategy: its own state, nested
            state[name] = {STRATEGY_TAG: aggregator_state(value)}
            continue
        ok, plain = _plain(value)
        if not ok:
            raise ValueError(
                f"{cls.__name__}.{name} is {type(getattr(aggregator, name)).__name__}: "
                "a checkpoint holds numbers, strings, numpy arrays, ArrayRecords and lists, "
                "tuples and str-keyed dicts of these"
            )
        state[name] = plain
    return state


def load_aggregator_state(
    aggregator: Strategy | None, state: Mapping[str, Any], model: Mapping[str, NDArray[Any]]
) -> None:
    """Restore the state :func:`aggregator_state` saved on the run's freshly built aggregator.

    Everything is checked before anything is set; ``model`` is the run's global model (what a
    :data:`MODEL` attribute must mirror). Raises ValueError (one line) for a state given to the
    default FedAvg (None), a name that is not state (a setting, or unknown), a missing state
    attribute, or a value of the wrong kind.
    """
    if aggregator is None:
        if state:
            raise ValueError(
                f"the checkpoint holds an aggregator's state ({sorted(state)[:3]}) but the run's "
                f"{AGGREGATOR_KEY!r} is the default FedAvg"
            )
        return
    _check(aggregator, state, model, type(aggregator).__name__)
    _load(aggregator, state)


def _load(aggregator: Strategy, state: Mapping[str, Any]) -> None:
    """Set the checked ``state`` on ``aggregator`` (a held strategy's into the one it holds)."""
    for name in state_attributes(type(aggregator)):
        held = getattr(aggregator, name, None)
        if isinstance(held, Strategy):
            _load(held, state[name][STRATEGY_TAG])
        else:
            setattr(aggregator, name, _restored(state[name]))


def _check(
    aggregator: Strategy, state: Mapping[str, Any], model: Mapping[str, NDArray[Any]], path: str
) -> None:
    """Every check of :func:`load_aggregator_state`, nested strategies' too (``path``: names)."""
    if not isinstance(state, Mapping):
        raise ValueError(f"the aggregator state of {path} is {type(state).__name__}, not a dict")
    kinds = state_attributes(type(aggregator))
    shown = ", ".join(kinds) or "none"
    extra = [name for name in state if name not in kinds]
    if extra:
        name = extra[0]
        what = "a setting from the run config" if name in vars(aggregator) else "unknown"
        raise ValueError(
            f"the aggregator state holds {path}.{name} ({what}, not state; the state of "
            f"{type(aggregator).__name__} is: {shown}): the settings in effect are the run "
            "config's"
        )
    missing = [name for name in kinds if name not in state]
    if missing:
        raise ValueError(f"the aggregator state lacks {path}.{missing[0]} (its state: {shown})")
    for name, kind in kinds.items():
        problem = _kind_problem(aggregator, name, kind, state[name], model, f"{path}.{name}")
        if problem is not None:
            raise ValueError(f"the aggregator state's {path}.{name} {problem}")


def _kind_problem(
    aggregator: Strategy,
    name: str,
    kind: str,
    saved: Any,
    model: Mapping[str, NDArray[Any]],
    path: str,
) -> str | None:
    """Why ``saved`` is not a value of ``kind`` for attribute ``name``; None when it is.

    A declared attribute (:data:`PLAIN`) that holds a strategy is a :data:`HELD` one.
    """
    held = getattr(aggregator, name, None)
    if kind == HELD or (kind == PLAIN and isinstance(held, Strategy)):
        if not isinstance(held, Strategy):
            return f"is a held strategy's state, but the run's holds {type(held).__name__} there"
        if not (isinstance(saved, dict) and set(saved) == {STRATEGY_TAG}):
            return f"is {type(saved).__name__}, not the state of the held {type(held).__name__}"
        _check(held, saved[STRATEGY_TAG], model, path)  # raises, naming the nested attribute
        return None
    if isinstance(saved, dict) and STRATEGY_TAG in saved:
        return "is a held strategy's state, where the run's aggregator holds none"
    value = _restored(saved)
    if kind == POSITIVE:
        number = value.item() if isinstance(value, np.generic) else value
        if isinstance(number, bool) or not isinstance(number, int | float):
            return f"is {type(value).__name__}, not {POSITIVE}"
        if not (math.isfinite(number) and number > 0):
            return f"= {number!r}; allowed: {POSITIVE}"
        return None
    if kind == MODEL:
        return _model_arrays_problem(value, model)
    return None


def _model_arrays_problem(value: object, model: Mapping[str, NDArray[Any]]) -> str | None:
    """Why ``value`` does not mirror ``model`` (see :data:`MODEL`); None when it does."""
    if value is None:
        return None
    if isinstance(value, ArrayRecord):
        arrays: Mapping[str, Any] = {k: v.numpy() for k, v in value.items()}
    elif isinstance(value, dict):
        arrays = value
    elif isinstance(value, list | tuple):
        if value and len(value) != len(model):
            return f"holds {len(value)} arrays; the model has {len(model)}"
        arrays = dict(zip(model, value, strict=False))
    else:
        return f"is {type(value).__name__}, not arrays of the model"
    if not arrays:
        return None
    if set(arrays) != set(model):
        odd = sorted(set(arrays) ^ set(model))[:3]
        return f"has other arrays than the model ({', '.join(map(repr, odd))} in one only)"
    for key, reference in model.items():
        array = arrays[key]
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            return f"holds {type(array).__name__} for {key!r}, not a numeric array"
        if array.shape != reference.shape:
            shapes = f"{list(array.shape)}; the model's is {list(reference.shape)}"
            return f"has {key!r} of shape {shapes}"
        if reference.dtype.kind == "f" and array.dtype != reference.dtype:
            return f"has {key!r} of dtype {array.dtype}; the model's is {reference.dtype}"
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return f"has {key!r} not finite"
    return None


def check_declared_state(aggregator: Strategy, before: Mapping[str, Any], setting: str) -> None:
    """Refuse a strategy whose probe round changed an attribute its checkpoint would not hold.

    ``before`` is the :func:`snapshot` of the fresh strategy. Raises ValueError (one line naming
    ``aggregator``, the attributes and how to declare them).
    """
    try:
        aggregator_state(aggregator)
        changed = _changed(aggregator, before, type(aggregator).__name__)
    except ValueError as err:
        raise ValueError(f"run-config key {AGGREGATOR_KEY!r} = {setting!r}: {err}") from err
    if changed:
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r}: its round changes "
            f"{', '.join(changed)}, which a checkpoint would not hold (a resumed run would "
            f"differ); name every attribute of its state in a class attribute {DECLARED} = "
            "(...)"
        )


def _changed(aggregator: Strategy, before: Mapping[str, Any], path: str) -> list[str]:
    """The attributes that changed since ``before`` and are not state (nested: dotted)."""
    kinds = state_attributes(type(aggregator))
    after = snapshot(aggregator)
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        held = getattr(aggregator, name, None)
        if kinds.get(name) == HELD and isinstance(held, Strategy) and isinstance(old, dict):
            out += _changed(held, old.get(STRATEGY_TAG, {}), f"{path}.{name}")
        elif name not in kinds and name not in SET_EACH_ROUND and not _same(old, new):
            out.append(f"{path}.{name}")
    return out


def _same(a: object, b: object) -> bool:
    """Equal plain data (:func:`_plain`'s output): arrays by dtype, shape and values."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    return a == b
