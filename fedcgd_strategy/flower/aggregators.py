"""Flower strategies as aggregators of the scheduled uploads (run-config ``aggregator``).

``""`` keeps the scheduler's FedAvg (:func:`fedcgd_strategy.aggregation.fedavg`); a named
strategy (aggregator_params.py) combines the round's validated uploads in its own
``aggregate_train``, and what it holds as arrays and numbers is its state for checkpoints. How
Flower's interface is adapted, server-side DP and the state's rule included: docs/design.md,
"Any Flower aggregation" and "Server-side differential privacy".
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import math
import pickle
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import non_finite_arrays
from fedcgd_strategy.flower.aggregator_params import (
    AGGREGATOR_KEY,
    DECLARED,
    POSITIVE,
    SERVER_SIDE_DP,
    SET_EACH_ROUND,
    flower_log,
    inner_strategy,
    make_aggregator,
    minimum_uploads,
    state_names,
)
from fedcgd_strategy.flower.local_grid import LocalGrid
from fedcgd_task import keys
from fedcgd_task.array_codec import array_record, numpy_arrays
from fedcgd_task.errors import RuleBrokenError
from fedcgd_task.imports import first_line

Arrays = Mapping[str, NDArray[np.generic]]


#: Stream tag of the noise's seed (mixed with the run seed and the round): "NOIS".
NOISE_STREAM = 0x4E4F4953


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
    need, why = minimum_uploads(aggregator)
    if len(models) < need:
        return None, f"too few uploads for {name}: {len(models)} < {need} ({why})"
    before = {n: copy.deepcopy(getattr(aggregator, n, None)) for n in state_names(aggregator)}
    wanted = (getattr(inner, k, 0) or 0 for k in ("min_available_nodes", "min_train_nodes"))
    grid, current = StandInGrid(max(len(models), *map(int, wanted))), reference
    if isinstance(aggregator, SERVER_SIDE_DP):
        models, weights, current = [_floats(m) for m in models], [1] * len(models), _floats(current)
        aggregator.num_sampled_clients = len(models)
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
    for attribute, value in before.items() if result is None else ():
        setattr(aggregator, attribute, value)
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


def synthetic_uploads(
    count: int, reference: Arrays | None = None
) -> tuple[dict[str, NDArray[np.generic]], list[Arrays]]:
    """``reference`` (default a tiny model) and ``count`` distinct uploads of it (trial rounds)."""
    if reference is None:
        reference = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    ref: dict[str, NDArray[Any]] = {k: np.asarray(v) for k, v in reference.items()}
    return ref, [{k: (v + 0.01 * (i + 1)).astype(v.dtype) for k, v in ref.items()}
                 for i in range(count)]  # fmt: skip


def _trial_round(aggregator: Strategy, reference: Arrays | None = None) -> tuple[int, str | None]:
    """Aggregate a synthetic round of uploads of ``reference``: (uploads, why it failed or None)."""
    reference, models = synthetic_uploads(max(minimum_uploads(aggregator)[0], 3),
                                          reference)  # fmt: skip
    with flower_log(logging.WARNING):  # the trial's INFO lines are noise
        result, reason = aggregate_uploads(aggregator, 1, models, [1] * len(models), reference)
    return len(models), None if result is not None else reason


def check_aggregator(setting: str, params: Mapping[str, object], num_devices: int) -> None:
    """Refuse, before the start, an aggregator that cannot work in this run.

    A fresh instance must take ``aggregator-params``, need no more than ``num_devices`` uploads,
    aggregate a synthetic round into a model, and change only state a checkpoint holds. Raises
    ValueError (one line naming the setting, the value and what is allowed).
    """
    aggregator = make_aggregator(setting, params, num_devices)
    if aggregator is None:
        return
    head = f"run-config key {AGGREGATOR_KEY!r} = {setting!r}"
    fresh = fingerprint(aggregator)
    try:  # a state attribute that holds no data is refused, fresh or after the round
        aggregator_state(aggregator)
        count, reason = _trial_round(aggregator)
        aggregator_state(aggregator)
        changed = unsaved_changes(aggregator, fresh, type(aggregator).__name__)
    except ValueError as err:
        raise ValueError(f"{head}: {err}") from err
    if reason is not None:
        raise ValueError(
            f"{head} cannot aggregate the scheduler's uploads (probed on {count} synthetic "
            f"uploads: {reason})"
        )
    if changed:
        raise ValueError(
            f"{head}: its round changes {', '.join(changed)}, which a checkpoint would not hold "
            "(a resumed run would differ); name every attribute of its state in a class "
            f"attribute {DECLARED} = (...)"
        )


# --- state for checkpoints: docs/design.md, "Any Flower aggregation", State ---------------------


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """The state as plain data and copied arrays (``{}`` for None; ValueError: not data)."""
    name, state = type(aggregator).__name__, {}
    for attribute in [] if aggregator is None else state_names(aggregator):
        if attribute not in vars(aggregator):
            raise ValueError(f"{name} has no attribute {attribute!r} (named as its state)")
        state[attribute] = plain_data(getattr(aggregator, attribute), f"{name}.{attribute}")
    return state


def plain_data(value: Any, where: str) -> Any:
    """``value`` as what a checkpoint holds, arrays copied; ValueError naming what it cannot hold.

    Numbers, strings, None, numpy and (torch imported) torch arrays, ArrayRecords, aggregators'
    states, and lists, tuples and str-keyed dicts of these. The error names ``where`` with the
    key or index inside it (``where['avg'][2]``) and the type found (a ValueError).
    """
    torch = sys.modules.get("torch")  # a tensor exists only where torch is imported
    if isinstance(value, Strategy):
        return aggregator_state(value)
    if isinstance(value, ArrayRecord):
        return {k: v.numpy() for k, v in value.items()}
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in "biufc":
        return np.array(value)
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list | tuple):
        items = (plain_data(v, f"{where}[{i}]") for i, v in enumerate(value))
        return list(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return {k: plain_data(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise RuleBrokenError(
        f"{where} is {type(value).__name__}: a checkpoint holds numbers, strings, numpy and torch "
        "arrays, ArrayRecords and lists, tuples and str-keyed dicts of these"
    )


def load_aggregator_state(
    aggregator: Strategy | None, state: Mapping[str, Any], model: Arrays
) -> None:
    """Check, then set what :func:`aggregator_state` saved on a freshly built ``aggregator``.

    Every value must fit what a copy of it holds after a trial round on ``model`` (the run's
    global model): its kind, keys and lengths, array shapes and floating dtypes, finite numbers.
    Raises ValueError (one line) for a state given to the default FedAvg (None), a name that is
    not state (a setting, or unknown), a missing state attribute, or a value that does not fit.
    """
    if aggregator is None and state:
        raise ValueError(
            f"the checkpoint holds an aggregator's state ({sorted(state)[:3]}) but the run's "
            "'aggregator' is the default FedAvg"
        )
    if aggregator is None or not (state or state_names(aggregator)):
        return
    trial = copy.deepcopy(aggregator)
    _, reason = _trial_round(trial, model) if state else (0, None)
    if reason is not None:
        raise ValueError(f"the aggregator state cannot be checked: a trial round failed ({reason})")
    for owner, name, value in _fitted_state(aggregator, trial, state, type(aggregator).__name__):
        setattr(owner, name, value)


def _fitted_state(
    aggregator: Strategy, trial: Strategy, state: object, path: str
) -> list[tuple[Strategy, str, Any]]:
    """(owner, attribute, value) to set: :func:`load_aggregator_state`'s checks, nested."""
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
    out = []
    for name in names:
        if name not in state:
            raise ValueError(f"the aggregator state lacks {path}.{name} ({shown})")
        held = getattr(trial, name, None)
        if isinstance(held, Strategy):
            out += _fitted_state(getattr(aggregator, name), held, state[name], f"{path}.{name}")
        else:
            out.append((aggregator, name, _restored(state[name], held, f"{path}.{name}", name)))
    return out


def _restored(saved: Any, held: Any, where: str, name: str) -> Any:
    """``saved`` as the kind of value ``held`` (what the trial left) is; ValueError if unfit."""

    def refuse(problem: str) -> ValueError:
        return ValueError(f"the aggregator state's {where} {problem}")

    if isinstance(held, ArrayRecord):
        arrays = _restored(saved, {k: v.numpy() for k, v in held.items()}, where, name)
        return _record(arrays)
    if saved is None or held is None:
        return saved
    if isinstance(held, dict | list | tuple):
        if not isinstance(saved, type(held)):
            raise refuse(f"is {type(saved).__name__}, where the run's aggregator holds "
                         f"{type(held).__name__}")  # fmt: skip
        if isinstance(held, dict) and set(saved) != set(held):
            odd = sorted(set(saved) ^ set(held))[:3]
            raise refuse(f"has other keys than the run's ({', '.join(map(repr, odd))} in one only)")
        if len(saved) != len(held):
            raise refuse(f"holds {len(saved)} items; the run's aggregator holds {len(held)}")
        keys = list(held) if isinstance(held, dict) else range(len(held))
        items = [_restored(saved[k], held[k], f"{where}[{k!r}]", name) for k in keys]
        return dict(zip(keys, items, strict=True)) if isinstance(held, dict) else type(held)(items)
    if isinstance(held, np.ndarray | np.generic):
        if not isinstance(saved, np.ndarray) or saved.dtype.kind not in "biuf":
            raise refuse(f"is {type(saved).__name__}, not a numeric array")
        if saved.shape != held.shape:
            raise refuse(f"has shape {list(saved.shape)}; the run's is {list(held.shape)}")
        if held.dtype.kind == "f" and saved.dtype != held.dtype:
            raise refuse(f"has dtype {saved.dtype}; the run's is {held.dtype}")
        if saved.dtype.kind == "f" and not np.isfinite(saved).all():
            raise refuse("is not finite")
        return np.array(saved) if isinstance(held, np.ndarray) else saved[()]
    if isinstance(held, int | float) and not isinstance(held, bool):
        allowed = "a finite number" + (" > 0" if name in POSITIVE else "")
        if isinstance(saved, bool) or not isinstance(saved, int | float):
            raise refuse(f"is {type(saved).__name__}, not {allowed}")
        if not math.isfinite(saved) or (name in POSITIVE and saved <= 0):
            raise refuse(f"= {saved!r}; allowed: {allowed}")
    return saved


def fingerprint(aggregator: Strategy) -> dict[str, Any]:
    """Each attribute pickled (a held strategy's nested; one that pickles not is left out)."""
    out: dict[str, Any] = {}
    for name, value in vars(aggregator).items():
        with contextlib.suppress(Exception):
            out[name] = fingerprint(value) if isinstance(value, Strategy) else pickle.dumps(value)
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
