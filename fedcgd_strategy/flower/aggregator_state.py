"""An aggregator's state for checkpoints: what it holds as arrays and numbers, never a setting.

The rule, what it gives for Flower's strategies and the checks on resume: docs/design.md, "Any
Flower aggregation", State. Saved values are plain data and numpy arrays (stored as tensors by
:mod:`server_app.checkpoint`).
"""

from __future__ import annotations

import inspect
import math
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import Strategy
from numpy.typing import NDArray

from fedcgd_task.nested import DESCEND, map_nested

#: Tags of saved values that are not plain data: a held strategy's state, an ArrayRecord, a
#: numpy scalar.
HELD, RECORD, SCALAR = "__strategy__", "__arrayrecord__", "__numpy_scalar__"
#: Class attribute in which a researcher's strategy names the attributes of its state.
DECLARED = "checkpoint_state"
#: Checks on resume by attribute name: arrays that mirror the global model (None or empty
#: before the first round), and a finite number > 0.
MODEL_ARRAYS = ("current_arrays", "m_t", "v_t", "momentum_vector")
POSITIVE = ("clipping_norm",)
#: Attributes the scheduler sets before every round (a DP wrapper's n), so not state.
SET_EACH_ROUND = ("num_sampled_clients",)
DATA = "numbers, strings, numpy arrays, ArrayRecords and lists, tuples and str-keyed dicts of these"


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
    """The names of ``aggregator``'s state (the module's rule; ValueError: a bad declaration)."""
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


def _saved(value: Any, where: str) -> Any:
    """``value`` as plain data and copied numpy arrays (ValueError naming ``where``)."""
    if isinstance(value, Strategy):
        return {HELD: aggregator_state(value)}
    if isinstance(value, ArrayRecord):
        return {RECORD: {k: v.numpy() for k, v in value.items()}}
    if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in "biuf":
        return np.array(value) if isinstance(value, np.ndarray) else {SCALAR: np.array(value)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return type(value)(_saved(v, where) for v in value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _saved(v, where) for k, v in value.items()}
    raise ValueError(f"{where} is {type(value).__name__}: a checkpoint holds {DATA}")


def _restored(value: Any) -> Any:
    """The inverse of :func:`_saved` (a held strategy's state is set by :func:`set_state`)."""

    def untag(item: Any) -> Any:
        if isinstance(item, dict) and set(item) == {RECORD}:
            return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in item[RECORD].items()})
        if isinstance(item, dict) and set(item) == {SCALAR}:
            return np.asarray(item[SCALAR])[()]
        return np.array(item) if isinstance(item, np.ndarray) else DESCEND

    return map_nested(value, untag)


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """The aggregator's state as plain data (``{}`` for the default FedAvg, None).

    Raises ValueError for a state attribute that is not data (a declaration naming an object).
    """
    name, state = type(aggregator).__name__, {}
    for attribute in [] if aggregator is None else state_names(aggregator):
        if attribute not in vars(aggregator):
            raise ValueError(f"{name} has no attribute {attribute!r} (named as its state)")
        state[attribute] = _saved(getattr(aggregator, attribute), f"{name}.{attribute}")
    return state


def set_state(aggregator: Strategy, state: Mapping[str, Any]) -> None:
    """Set a checked or just saved ``state`` (a held strategy's into the one it holds)."""
    for name, value in state.items():
        held = getattr(aggregator, name, None)
        if isinstance(held, Strategy):
            set_state(held, value[HELD])
        else:
            setattr(aggregator, name, _restored(value))


def load_aggregator_state(
    aggregator: Strategy | None, state: Mapping[str, Any], model: Mapping[str, NDArray[Any]]
) -> None:
    """Check, then restore what :func:`aggregator_state` saved on a freshly built aggregator.

    ``model`` is the run's global model. Raises ValueError (one line) for a state given to the
    default FedAvg (None), a name that is not state (a setting, or unknown), a missing state
    attribute, or a value that does not fit.
    """
    if aggregator is None and state:
        raise ValueError(
            f"the checkpoint holds an aggregator's state ({sorted(state)[:3]}) but the run's "
            "'aggregator' is the default FedAvg"
        )
    if aggregator is not None:
        _check(aggregator, state, model, type(aggregator).__name__)
        set_state(aggregator, state)


def _check(
    aggregator: Strategy, state: Mapping[str, Any], model: Mapping[str, NDArray[Any]], path: str
) -> None:
    """Every check of :func:`load_aggregator_state`, nested strategies' too (``path``: names)."""
    if not isinstance(state, Mapping):
        raise ValueError(f"the aggregator state of {path} is {type(state).__name__}, not a dict")
    names = state_names(aggregator)
    shown = f"the state of {type(aggregator).__name__} is: {', '.join(names) or 'none'}"
    for name in [n for n in state if n not in names]:
        what = "a setting from the run config" if name in vars(aggregator) else "unknown"
        raise ValueError(
            f"the aggregator state holds {path}.{name} ({what}, not state; {shown}): the "
            "settings in effect are the run config's"
        )
    for name in names:
        if name not in state:
            raise ValueError(f"the aggregator state lacks {path}.{name} ({shown})")
        saved, held = state[name], getattr(aggregator, name, None)
        if isinstance(held, Strategy) and isinstance(saved, dict) and set(saved) == {HELD}:
            _check(held, saved[HELD], model, f"{path}.{name}")
            continue
        problem = _problem(name, _restored(saved), held, model)
        if problem is not None:
            raise ValueError(f"the aggregator state's {path}.{name} {problem}")


def _problem(name: str, value: Any, held: object, model: Mapping[str, NDArray[Any]]) -> str | None:
    """Why the saved ``value`` of attribute ``name`` does not fit; None when it does."""
    if isinstance(held, Strategy) or (isinstance(value, dict) and HELD in value):
        return f"is {type(value).__name__}, where the run's aggregator holds {type(held).__name__}"
    if name in POSITIVE:
        number = value.item() if isinstance(value, np.generic) else value
        if isinstance(number, bool) or not isinstance(number, int | float):
            return f"is {type(value).__name__}, not a finite number > 0"
        return (
            None
            if math.isfinite(number) and number > 0
            else f"= {number!r}; allowed: a finite number > 0"
        )
    if name not in MODEL_ARRAYS or value is None:
        return None
    if isinstance(value, ArrayRecord):
        value = {k: v.numpy() for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and len(value) != len(model):
            return f"holds {len(value)} arrays; the model has {len(model)}"
        value = dict(zip(model, value, strict=False))
    if not isinstance(value, dict):
        return f"is {type(value).__name__}, not arrays of the model"
    if value and set(value) != set(model):
        odd = sorted(set(value) ^ set(model))[:3]
        return f"has other arrays than the model ({', '.join(map(repr, odd))} in one only)"
    for key, ref in model.items() if value else ():
        array = value[key]
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
            return f"holds {type(array).__name__} for {key!r}, not a numeric array"
        if array.shape != ref.shape:
            return f"has {key!r} of shape {list(array.shape)}; the model's is {list(ref.shape)}"
        if ref.dtype.kind == "f" and array.dtype != ref.dtype:
            return f"has {key!r} of dtype {array.dtype}; the model's is {ref.dtype}"
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return f"has {key!r} not finite"
    return None


def fingerprint(aggregator: Strategy) -> dict[str, Any]:
    """Each attribute pickled (a held strategy's nested; one that pickles not is left out)."""
    out: dict[str, Any] = {}
    for name, value in vars(aggregator).items():
        try:
            out[name] = fingerprint(value) if isinstance(value, Strategy) else pickle.dumps(value)
        except Exception:
            continue
    return out


def unsaved_changes(aggregator: Strategy, before: Mapping[str, Any], path: str) -> list[str]:
    """The attributes changed since the :func:`fingerprint` ``before`` that are not state."""
    names, after, out = state_names(aggregator), fingerprint(aggregator), []
    for name in sorted(set(before) | set(after)):
        if isinstance(before.get(name), dict) and isinstance(after.get(name), dict):
            out += unsaved_changes(getattr(aggregator, name), before[name], f"{path}.{name}")
        elif name not in (*names, *SET_EACH_ROUND) and before.get(name) != after.get(name):
            out.append(f"{path}.{name}")
    return out
