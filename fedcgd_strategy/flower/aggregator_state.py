"""An aggregator's state as plain data, for checkpoints (run-config ``aggregator``).

Momentum vectors, Adam moments, a strategy's copy of the global model, a DP wrapper's
adaptive clipping norm: :func:`aggregator_state` reads every attribute of the strategy that is
data, generically (no list of names per strategy), and :func:`load_aggregator_state` sets it
back. A strategy held by another (the ``strategy`` a Flower DP wrapper wraps) is state too: its
own state is nested under :data:`STRATEGY_TAG` and loaded back into the object the run built.
The values are numbers, strings and numpy arrays (tagged), so that ``torch.load(...,
weights_only=True)`` reads the checkpoint (:mod:`server_app.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import Strategy

from fedcgd_strategy.flower.aggregator_registry import AGGREGATOR_KEY
from fedcgd_task.nested import DESCEND, map_nested

#: Tags of the values :func:`aggregator_state` writes that are not plain Python data.
ARRAY_TAG, SCALAR_TAG, RECORD_TAG = "__ndarray__", "__numpy_scalar__", "__arrayrecord__"
#: Tag of the state of a strategy held by the aggregator (a DP wrapper's inner strategy).
STRATEGY_TAG = "__strategy__"


def _plain(value: object) -> tuple[bool, object]:
    """(True, a copy of ``value`` in plain data and numpy arrays), or (False, None).

    (False, None) is for what is not data (functions, other objects).
    """
    if value is None or isinstance(value, bool | int | float | str):
        return True, value
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return True, {ARRAY_TAG: value.copy()}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return True, {SCALAR_TAG: np.asarray(value).copy()}
    if isinstance(value, ArrayRecord):
        return True, {RECORD_TAG: {k: v.numpy() for k, v in value.items()}}
    if isinstance(value, Strategy):
        return True, {STRATEGY_TAG: aggregator_state(value)}
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


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """The aggregator's attributes that are data, as plain data and numpy arrays.

    Momentum vectors, Adam moments, a strategy's copy of the global model, its
    hyper-parameters: everything in its ``__dict__`` made of None, bool, int, float, str,
    numeric numpy arrays and scalars, ArrayRecords, strategies it holds (their own state,
    nested), and lists, tuples and str-keyed dicts of these. Functions and other objects are
    not state (they come from the constructor). ``{}`` for the default FedAvg (None).
    """
    if aggregator is None:
        return {}
    state = {}
    for name, value in vars(aggregator).items():
        ok, plain = _plain(value)
        if ok:
            state[name] = plain
    return state


def load_aggregator_state(aggregator: Strategy | None, state: Mapping[str, Any]) -> None:
    """Set the attributes :func:`aggregator_state` returned back on ``aggregator``.

    The state of a held strategy is loaded into the strategy the aggregator holds now.

    Raises
    ------
    ValueError
        A state for an aggregator when the run has none (the default FedAvg), or a held
        strategy's state where the aggregator holds none.

    """
    if aggregator is None:
        if state:
            raise ValueError(
                f"the checkpoint holds an aggregator's state ({sorted(state)[:3]}) but the run's "
                f"{AGGREGATOR_KEY!r} is the default FedAvg"
            )
        return
    for name, value in state.items():
        if isinstance(value, dict) and set(value) == {STRATEGY_TAG}:
            held = getattr(aggregator, name, None)
            if not isinstance(held, Strategy):
                raise ValueError(
                    f"the checkpoint holds the state of a strategy in {name!r}, but the run's "
                    f"{type(aggregator).__name__} holds {type(held).__name__} there"
                )
            load_aggregator_state(held, value[STRATEGY_TAG])
            continue
        setattr(aggregator, name, _restored(value))
