"""Flower strategies as aggregators of the scheduled uploads (run-config ``aggregator``).

The scheduler decides *who* uploads; the aggregator decides how their models are combined. The
run-config key ``aggregator`` names a Flower Message-API strategy: a short name of one that
ships with Flower (``FedMedian``, ``FedTrimmedAvg``, ``Krum``, ``MultiKrum``, ``Bulyan``,
``FedAvgM``, ``FedAdam``, ``FedYogi``, ``FedAdagrad``, ``FedAvg``: the names of
``flwr.serverapp.strategy``) or any :class:`flwr.serverapp.strategy.Strategy` subclass as
``package.module:ClassName`` or ``/absolute/path/file.py:ClassName``. Its constructor arguments
come from ``aggregator-params`` (checked against the constructor's signature before the start,
as ``policy-params`` are). ``""`` (the default) keeps the scheduler's own FedAvg
(:func:`fedcgd_strategy.aggregation.fedavg`, float64 accumulation), bit for bit as before.

Each round, :func:`aggregate_uploads` hands the scheduled, validated uploads to the strategy's
own ``aggregate_train`` (Flower's code: nothing of it is re-implemented here). Where Flower's
interface made this module adapt (docs/design.md, "Any Flower aggregation"):

* replies are built from the validated arrays, one ArrayRecord under the strategy's
  ``arrayrecord_key`` and one MetricRecord holding |D_v| under its ``weighted_by_key`` (what
  Flower's reply check demands), never the device's raw reply;
* stateful strategies (FedAvgM, the FedOpt family) learn the global model in their own
  ``configure_train``: it is called with the round's global model and a stand-in grid that
  only lists node ids (its messages are discarded; the scheduler sends the real ones);
* the constructor parameters that steer Flower's own sampling and record keys
  (:data:`SCHEDULER_OWNS`) are refused: the scheduler chooses the trainees;
* Krum, MultiKrum and Bulyan need more uploads than attackers (:func:`minimum_uploads`): a
  run whose devices cannot reach that number is refused before the start, and a round with
  fewer uploads keeps the model, with the reason in its metrics line;
* the aggregate must have the global model's keys and shapes and finite values; it is cast
  to the global model's dtypes. Otherwise (or when ``aggregate_train`` raises or returns no
  model) the round keeps the model and the strategy's state is put back as it was.

The strategy's state (momentum, Adam moments, its copy of the model) is read and restored by
:func:`aggregator_state` / :func:`load_aggregator_state` for checkpoints.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp import strategy as flower_strategies
from flwr.serverapp.strategy import Bulyan, FedProx, MultiKrum, Strategy
from flwr.supercore.logger import FLOWER_LOGGER
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import non_finite_arrays
from fedcgd_task import keys
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

Arrays = Mapping[str, NDArray[np.generic]]


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


def aggregator_class(setting: str) -> type[Strategy]:
    """The Flower strategy class ``aggregator = setting`` names.

    Raises
    ------
    ValueError
        One line naming the key, the value and what is allowed.

    """
    if is_reference(setting):
        found = import_object(setting, AGGREGATOR_KEY)
    elif setting in short_names():
        found = getattr(flower_strategies, setting)
    else:
        raise ValueError(
            f'run-config key {AGGREGATOR_KEY!r} = {setting!r}; allowed: "" (the scheduler\'s '
            f"FedAvg), a Flower strategy ({', '.join(short_names())}) or a Strategy subclass as "
            f"{REFERENCE_FORMS}"
        )
    if not (isinstance(found, type) and issubclass(found, Strategy)):
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r} is {found!r}, not a subclass of "
            "flwr.serverapp.strategy.Strategy"
        )
    if issubclass(found, FedProx):
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r}: FedProx changes the clients' "
            "training (a proximal term its configure_train asks for), not the aggregation, "
            "which is FedAvg's; this app's clients do not apply it, so it is refused"
        )
    return found


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n: p for n, p in inspect.signature(cls).parameters.items() if p.kind in kinds}


def _scalar_type(cls: type, parameter: inspect.Parameter) -> type | None:
    """bool, int, float or str: the annotation, else the default's type; None otherwise."""
    try:
        hints = typing.get_type_hints(getattr(cls, "__init__"))  # noqa: B009
    except Exception:  # unresolvable annotations: fall back to the default
        hints = {}
    hinted = hints.get(parameter.name)
    if hinted in (bool, int, float, str):
        return typing.cast(type, hinted)
    default = parameter.default
    return next((t for t in (bool, int, float, str) if type(default) is t), None)


def aggregator_arguments(setting: str, params: Mapping[str, object]) -> dict[str, object]:
    """Check ``aggregator-params`` against the constructor of ``setting``; return the kwargs.

    Names may be kebab or snake case. Refused, each in one line: a name the constructor does
    not take, one the scheduler owns (:data:`SCHEDULER_OWNS`), one whose parameter is not a
    bool, int, float or str (a run config holds nothing else), a value of another type, and a
    required parameter left unset.

    Raises
    ------
    ValueError
        Naming ``aggregator-params.<name>``, the value and what is allowed.

    """
    cls = aggregator_class(setting)
    parameters = _parameters(cls)
    settable = {
        n: t
        for n, p in parameters.items()
        if n not in SCHEDULER_OWNS and (t := _scalar_type(cls, p)) is not None
    }
    arguments: dict[str, object] = {}
    for key, value in params.items():
        name = key.replace("-", "_")
        allowed = ", ".join(n.replace("_", "-") for n in settable) or "none"
        if name in SCHEDULER_OWNS:
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key}: not settable here ({SCHEDULER_OWNS[name]}); "
                f"allowed for {setting!r}: {allowed}"
            )
        if name not in settable:
            why = "takes no parameter" if name not in parameters else "cannot take a value for"
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key}: aggregator {setting!r} {why} {name!r} "
                f"from a run config; allowed: {allowed}"
            )
        wanted = settable[name]
        if wanted is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value  # type: ignore[arg-type]
        elif wanted is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, wanted)
        if not ok:
            raise ValueError(
                f"run-config key {PARAMS_KEY}.{key} = {value!r} for aggregator {setting!r}; "
                f"allowed: {'an' if wanted is int else 'a'} {wanted.__name__} (like its default "
                f"{parameters[name].default!r})"
            )
        arguments[name] = value
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty and name not in arguments:
            how = (
                f"set run-config key {PARAMS_KEY}.{name.replace('_', '-')}"
                if name in settable
                else "it is not a value a run config can hold, so this strategy cannot be "
                "named here"
            )
            raise ValueError(f"aggregator {setting!r} needs a value for {name!r}: {how}")
    return arguments


def make_aggregator(setting: str, params: Mapping[str, object]) -> Strategy | None:
    """A fresh aggregator for ``aggregator = setting``; None for the default FedAvg.

    Raises
    ------
    ValueError
        One line: see :func:`aggregator_arguments`; or the constructor raised.

    """
    if setting == DEFAULT_AGGREGATOR:
        if params:
            raise ValueError(
                f"run-config key {PARAMS_KEY} = {dict(params)!r} is set, but {AGGREGATOR_KEY!r} "
                'is "" (the scheduler\'s FedAvg takes no parameters); name an aggregator'
            )
        return None
    arguments = aggregator_arguments(setting, params)
    try:
        return aggregator_class(setting)(**arguments)
    except Exception as err:
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r}: building it with {arguments} "
            f"raised {type(err).__name__}: {first_line(err)}"
        ) from err


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


class StandInGrid(Grid):
    """What an aggregator's own ``configure_train`` sees: ``num_nodes`` node ids, nothing else.

    Stateful Flower strategies remember the global model in ``configure_train``; they sample
    from the grid's node ids and build messages, which are discarded. Sending is refused: the
    scheduler sends the round's messages. A strategy that keeps waiting for more nodes than
    are listed is stopped after :attr:`MAX_LISTINGS` listings instead of hanging.
    """

    MAX_LISTINGS = 10

    def __init__(self, num_nodes: int) -> None:
        self.node_ids = list(range(1, num_nodes + 1))
        self.listings = 0

    def set_run(self, run: Run) -> None:
        """Nothing to do: there is no run behind this grid."""

    @property
    def run(self) -> Run:
        """There is no run behind this grid."""
        raise RuntimeError("the aggregator's configure_train may only list node ids")

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Refused (the scheduler builds the round's messages)."""
        raise RuntimeError("the aggregator's configure_train may only list node ids")

    def get_node_ids(self) -> Iterable[int]:
        """The stand-in node ids (refused after :attr:`MAX_LISTINGS` calls in one round)."""
        self.listings += 1
        if self.listings > self.MAX_LISTINGS:
            raise RuntimeError(
                f"the aggregator's configure_train waits for more than {len(self.node_ids)} "
                "nodes (its own sampling settings); it cannot run behind the scheduler"
            )
        return list(self.node_ids)

    def get_nodes(self) -> Any:
        """Refused (only node ids are listed)."""
        raise RuntimeError("the aggregator's configure_train may only list node ids")

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Refused (the scheduler sends the round's messages)."""
        raise RuntimeError("the aggregator's configure_train may not send messages")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Refused (the scheduler sends the round's messages)."""
        raise RuntimeError("the aggregator's configure_train may not send messages")

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Refused (the scheduler sends the round's messages)."""
        raise RuntimeError("the aggregator's configure_train may not send messages")


@contextlib.contextmanager
def _task_identity() -> Iterator[None]:
    """Set a placeholder task identity while outside a run (the check before the start).

    Flower's messages read the process's task identity; inside a ServerApp it is set and left.
    """
    try:
        TaskIdentity.run_id  # noqa: B018  # set inside a ServerApp
        yield
        return
    except RuntimeError:
        pass
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 0, 0, 0
    try:
        yield
    finally:
        TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = None  # type: ignore[assignment]


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Let a strategy's explicit ``gc.collect()`` scan only what it allocated itself.

    Flower's ``ArrayRecord.to_numpy_ndarrays(keep_input=False)`` (Bulyan) collects garbage
    once per reply: with torch loaded that is ~60 ms each, seconds per round. The objects that
    exist before the call are frozen for its duration (:func:`gc.freeze`) and unfrozen after,
    so nothing is lost: garbage among them is collected later, as usual.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _record(arrays: Arrays) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def upload_replies(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    node_ids: Sequence[int] | None = None,
) -> list[Message]:
    """The uploads as the training replies a Flower strategy reads.

    One Message per upload holding one ArrayRecord (under the strategy's ``arrayrecord_key``,
    default ``"arrays"``) and one MetricRecord with |D_v| under its ``weighted_by_key``
    (default ``"num-examples"``), from node ``node_ids[i]`` (default ``i + 1``).
    """
    arrays_key = str(getattr(aggregator, "arrayrecord_key", keys.ARRAYS))
    weight_key = str(getattr(aggregator, "weighted_by_key", keys.NUM_EXAMPLES))
    replies = []
    for i, (model, weight) in enumerate(zip(models, weights, strict=True)):
        node = int(node_ids[i]) if node_ids is not None else i + 1
        metadata = Metadata(
            run_id=0,
            message_id=f"upload-{server_round}-{i}",
            src_node_id=node,
            dst_node_id=0,
            reply_to_message_id="",
            group_id=str(server_round),
            created_at=0.0,
            ttl=0.0,
            message_type=MessageType.TRAIN,
        )
        content = RecordDict(
            {arrays_key: _record(model), keys.METRICS: MetricRecord({weight_key: int(weight)})}
        )
        # a reply as Flower's Grid returns one (its metadata set, not the process's identity)
        replies.append(Message(content=content, metadata=metadata))  # type: ignore[call-overload]
    return replies


def aggregate_uploads(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    reference: Arrays,
    node_ids: Sequence[int] | None = None,
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    """Combine the round's uploads with ``aggregator``'s own ``aggregate_train``.

    Parameters
    ----------
    aggregator : flwr.serverapp.strategy.Strategy
        The run's aggregator (it may keep state across rounds).
    server_round : int
        The round (passed to the strategy).
    models : sequence of mapping str -> ndarray
        The scheduled devices' validated models (the global model's keys, shapes, dtypes).
    weights : sequence of int
        Their |D_v|.
    reference : mapping str -> ndarray
        The global model of this round.
    node_ids : sequence of int, optional
        The uploading nodes (named in Flower's log lines).

    Returns
    -------
    (dict or None, str or None)
        The new global model in the reference's dtypes and None; or None and why the model
        is kept (too few uploads, the strategy raised or returned nothing, an aggregate that
        does not fit the model or is not finite). When the model is kept, the strategy's
        state is restored to what it was before the call.

    """
    name = type(aggregator).__name__
    need, why = minimum_uploads(aggregator)
    if len(models) < need:
        return None, f"too few uploads for {name}: {len(models)} < {need} ({why})"
    before = aggregator_state(aggregator)  # copies
    result, reason = _call_aggregator(
        aggregator, server_round, models, weights, reference, node_ids
    )
    if result is None:
        load_aggregator_state(aggregator, before)
    return result, reason


def _call_aggregator(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    reference: Arrays,
    node_ids: Sequence[int] | None,
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    name = type(aggregator).__name__
    listed = max(
        len(models),
        int(getattr(aggregator, "min_available_nodes", 0) or 0),
        int(getattr(aggregator, "min_train_nodes", 0) or 0),
    )
    try:
        with _task_identity():
            list(
                aggregator.configure_train(
                    server_round, _record(reference), ConfigRecord(), StandInGrid(listed)
                )
            )
            replies = upload_replies(aggregator, server_round, models, weights, node_ids)
            with _frozen_heap():
                record, _ = aggregator.aggregate_train(server_round, replies)
    except Exception as err:  # a strategy's failure costs the round, never the run
        return None, f"{name}.aggregate_train raised {type(err).__name__}: {first_line(err)}"
    if record is None:
        return None, f"{name}.aggregate_train returned no model from {len(models)} uploads"
    out = {k: v.numpy() for k, v in record.items()}
    if list(out) != list(reference):
        if set(out) != set(reference):
            return None, f"{name}'s aggregate has arrays {sorted(out)[:3]}…, not the model's"
        out = {k: out[k] for k in reference}
    for key, ref in reference.items():
        if out[key].shape != np.shape(ref):
            return None, f"{name}'s aggregate has array {key!r} of shape {out[key].shape}"
        dtype = np.asarray(ref).dtype
        with np.errstate(over="ignore", invalid="ignore"):
            value = out[key]
            if np.issubdtype(dtype, np.integer):
                value = np.rint(value)
            out[key] = np.asarray(value).astype(dtype)
    bad = non_finite_arrays(out)
    if bad:
        return None, f"the {name} aggregate of {len(models)} uploads is not finite in {bad[:3]}"
    return out, None


# --- state, for checkpoints -------------------------------------------------------------------

#: Tags of the values :func:`aggregator_state` writes that are not plain Python data.
ARRAY_TAG, SCALAR_TAG, RECORD_TAG = "__ndarray__", "__numpy_scalar__", "__arrayrecord__"


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
    if isinstance(value, dict):
        if set(value) == {ARRAY_TAG}:
            return np.array(value[ARRAY_TAG])
        if set(value) == {SCALAR_TAG}:
            return np.asarray(value[SCALAR_TAG])[()]
        if set(value) == {RECORD_TAG}:
            return _record(value[RECORD_TAG])
        return {k: _restored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restored(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_restored(v) for v in value)
    return value


def aggregator_state(aggregator: Strategy | None) -> dict[str, Any]:
    """The aggregator's attributes that are data, as plain data and numpy arrays.

    Momentum vectors, Adam moments, a strategy's copy of the global model, its
    hyper-parameters: everything in its ``__dict__`` made of None, bool, int, float, str,
    numeric numpy arrays and scalars, ArrayRecords, and lists, tuples and str-keyed dicts of
    these. Functions and other objects are not state (they come from the constructor).
    ``{}`` for the default FedAvg (None).
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

    Raises
    ------
    ValueError
        A state for an aggregator when the run has none (the default FedAvg).

    """
    if aggregator is None:
        if state:
            raise ValueError(
                f"the checkpoint holds an aggregator's state ({sorted(state)[:3]}) but the run's "
                f"{AGGREGATOR_KEY!r} is the default FedAvg"
            )
        return
    for name, value in state.items():
        setattr(aggregator, name, _restored(value))


def synthetic_uploads(count: int) -> tuple[dict[str, NDArray[np.float32]], list[Arrays]]:
    """A tiny global model and ``count`` distinct uploads of it (the check before the start)."""
    reference = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    models: list[Arrays] = [
        {k: (v + np.float32(0.01 * (i + 1))).astype(np.float32) for k, v in reference.items()}
        for i in range(count)
    ]
    return reference, models


def check_aggregator(setting: str, params: Mapping[str, object], num_devices: int) -> None:
    """Refuse, before the start, an aggregator that cannot work in this run.

    Checks that the constructor takes ``aggregator-params`` (:func:`aggregator_arguments`),
    that ``num_devices`` can ever reach :func:`minimum_uploads`, and that the strategy's
    ``aggregate_train`` turns a synthetic round of that many uploads into a model (a fresh
    instance is probed; the run's own starts clean).

    Raises
    ------
    ValueError
        One line naming the setting, the value and what is allowed.

    """
    aggregator = make_aggregator(setting, params)
    if aggregator is None:
        return
    need, why = minimum_uploads(aggregator)
    if need > num_devices:
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r} with {PARAMS_KEY} = "
            f"{dict(params)!r}: {why}, more than num-devices = {num_devices}; lower "
            "num-malicious-nodes or add devices"
        )
    reference, models = synthetic_uploads(max(need, 3))
    previous = FLOWER_LOGGER.level
    FLOWER_LOGGER.setLevel(max(previous, logging.WARNING))  # the probe's INFO lines are noise
    try:
        result, reason = aggregate_uploads(aggregator, 1, models, [1] * len(models), reference)
    finally:
        FLOWER_LOGGER.setLevel(previous)
    if result is None:
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r} cannot aggregate the scheduler's "
            f"uploads (probed on {len(models)} synthetic uploads: {reason})"
        )
