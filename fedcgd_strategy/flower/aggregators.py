"""Flower strategies as aggregators of the scheduled uploads (run-config ``aggregator``).

:func:`aggregate_uploads` hands the scheduled, validated uploads to the strategy's own
``aggregate_train``; ``""`` keeps the scheduler's FedAvg (:func:`fedcgd_strategy.aggregation.
fedavg`). How Flower's interface is adapted is in docs/design.md, "Any Flower aggregation".
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.strategy import Strategy
from flwr.supercore.logger import FLOWER_LOGGER
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import non_finite_arrays
from fedcgd_strategy.flower.aggregator_registry import (
    AGGREGATOR_KEY,
    DEFAULT_AGGREGATOR,
    PARAMS_KEY,
    aggregator_arguments,
    aggregator_class,
    build_strategy,
    minimum_uploads,
    resolved_strategy,
)
from fedcgd_strategy.flower.aggregator_state import (
    check_declared_state,
    restore_snapshot,
    snapshot,
)
from fedcgd_strategy.flower.dp_aggregators import (
    INNER_PARAMS,
    INNER_TABLE,
    dp_inputs,
    inner_strategy,
    is_dp,
    is_dp_class,
    make_dp_aggregator,
    numpy_global_seeded,
    resolved_dp,
)
from fedcgd_strategy.flower.local_grid import LocalGrid
from fedcgd_task import keys
from fedcgd_task.array_codec import array_record, numpy_arrays
from fedcgd_task.constructor_params import kebab
from fedcgd_task.imports import first_line

Arrays = Mapping[str, NDArray[np.generic]]


def make_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int | None = None
) -> Strategy | None:
    """A fresh aggregator for ``aggregator = setting``; None for the default FedAvg.

    ``num_devices`` (V) is needed by the DP wrappers only. Raises ValueError (one line) when the
    parameters or the constructor refuse.
    """
    if setting == DEFAULT_AGGREGATOR:
        if params:
            raise ValueError(
                f"run-config key {PARAMS_KEY} = {dict(params)!r} is set, but {AGGREGATOR_KEY!r} "
                'is "" (the scheduler\'s FedAvg takes no parameters); name an aggregator'
            )
        return None
    if is_dp_class(aggregator_class(setting)):
        if num_devices is None:
            raise TypeError(f"aggregator {setting!r} is built with num_devices")
        return make_dp_aggregator(setting, params, num_devices)
    return build_strategy(setting, aggregator_arguments(setting, params, num_devices=num_devices))


def resolved_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int
) -> dict[str, object] | None:
    """What ``config.json`` records as ``aggregator_resolved``; None for the default FedAvg.

    ``{"class": "package.module:Name", "params": {...}, "from": {...}}``: every parameter, Flower's
    defaults filled in, and where each came from (:func:`with_sources`); a DP wrapper also has
    ``"strategy"``, the wrapped one's.
    """
    if setting == DEFAULT_AGGREGATOR:
        make_aggregator(setting, params)  # refuses parameters
        return None
    if not is_dp_class(aggregator_class(setting)):
        return with_sources(resolved_strategy(setting, params), params, PARAMS_KEY)
    resolved = with_sources(resolved_dp(setting, params, num_devices), params, PARAMS_KEY)
    inner = params.get(INNER_PARAMS)
    inner_given = inner if isinstance(inner, Mapping) else {}
    resolved["strategy"] = with_sources(resolved["strategy"], inner_given, INNER_TABLE)
    return resolved


#: Where a parameter that the run config does not set comes from, when not the class's default.
DERIVED_DEFAULTS = {"clipped-count-stddev": "Flower's default for num-devices (V / 20)"}


def with_sources(
    resolved: dict[str, Any], given: Mapping[str, object], table: str
) -> dict[str, Any]:
    """``resolved`` with ``"from"``: for each of its ``params``, where its value came from.

    ``run-config key '<table>'`` for a parameter ``given`` sets (kebab or snake case), else the
    class's default (:data:`DERIVED_DEFAULTS` says which Flower derives).
    """
    names = {kebab(str(name)) for name in given}
    resolved["from"] = {
        name: f"run-config key {table!r}"
        if name in names
        else DERIVED_DEFAULTS.get(name, "the class default")
        for name in resolved["params"]
    }
    return resolved


def uploads_needed(aggregator: Strategy) -> tuple[int, str]:
    """The fewest uploads the aggregating strategy (a DP wrapper's inner one) takes, and why."""
    return minimum_uploads(inner_strategy(aggregator))


class StandInGrid(LocalGrid):
    """What an aggregator's own ``configure_train`` sees: ``num_nodes`` node ids to list.

    Messages it builds are discarded and sending is refused; a strategy waiting for more nodes is
    stopped after :attr:`MAX_LISTINGS` listings instead of hanging.
    """

    MAX_LISTINGS = 10
    refusal = "the aggregator's configure_train may only list node ids, not send messages"

    def __init__(self, num_nodes: int) -> None:
        self.node_ids = list(range(1, num_nodes + 1))
        self.listings = 0

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


@contextlib.contextmanager
def _task_identity() -> Iterator[None]:
    """Set a placeholder task identity outside a ServerApp (the check before the start)."""
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

    Bulyan collects garbage once per reply (~60 ms each with torch loaded); pre-existing objects
    are frozen (:func:`gc.freeze`) for the call only, so nothing is lost.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _record(arrays: Arrays) -> ArrayRecord:
    return array_record({k: np.ascontiguousarray(v) for k, v in arrays.items()})


def upload_replies(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    node_ids: Sequence[int] | None = None,
) -> list[Message]:
    """The uploads as the training replies a Flower strategy reads.

    One Message per upload with an ArrayRecord under the strategy's ``arrayrecord_key`` and |D_v|
    under its ``weighted_by_key`` (those of the aggregating strategy), from node ``node_ids[i]``
    (default ``i + 1``).
    """
    inner = inner_strategy(aggregator)
    arrays_key = str(getattr(inner, "arrayrecord_key", keys.ARRAYS))
    weight_key = str(getattr(inner, "weighted_by_key", keys.NUM_EXAMPLES))
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
    *,
    seed: int = 0,
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    """Combine the round's uploads with ``aggregator``'s own ``aggregate_train``.

    Parameters
    ----------
    aggregator : flwr.serverapp.strategy.Strategy
        The run's aggregator (it may keep state across rounds).
    server_round : int
        The round (passed to the strategy).
    models : sequence of mapping str -> ndarray
        The scheduled devices' validated models.
    weights : sequence of int
        Their |D_v|.
    reference : mapping str -> ndarray
        The global model of this round.
    node_ids : sequence of int, optional
        The uploading nodes (named in Flower's log lines).
    seed : int
        The run's seed; numpy's global generator is seeded from (seed, round) for the call.

    Returns
    -------
    (dict or None, str or None)
        The new global model in the reference's dtypes and None; or None and why the model is
        kept, with the strategy's state restored to what it was before the call.
    """
    name = type(aggregator).__name__
    need, why = uploads_needed(aggregator)
    if len(models) < need:
        return None, f"too few uploads for {name}: {len(models)} < {need} ({why})"
    before = snapshot(aggregator)  # copies
    with numpy_global_seeded(seed, server_round):
        result, reason = _call_aggregator(
            aggregator, server_round, models, weights, reference, node_ids
        )
    if result is None:
        restore_snapshot(aggregator, before)
    return result, reason


def _call_aggregator(
    aggregator: Strategy,
    server_round: int,
    models: Sequence[Arrays],
    weights: Sequence[int],
    reference: Arrays,
    node_ids: Sequence[int] | None,
) -> tuple[dict[str, NDArray[np.generic]] | None, str | None]:
    name, inner = type(aggregator).__name__, inner_strategy(aggregator)
    listed = max(
        len(models),
        int(getattr(inner, "min_available_nodes", 0) or 0),
        int(getattr(inner, "min_train_nodes", 0) or 0),
    )
    current: Arrays = reference
    if is_dp(aggregator):
        models, weights, current = dp_inputs(aggregator, models, reference)
    try:
        with _task_identity():
            list(
                aggregator.configure_train(
                    server_round, _record(current), ConfigRecord(), StandInGrid(listed)
                )
            )
            replies = upload_replies(aggregator, server_round, models, weights, node_ids)
            with _frozen_heap():
                record, _ = aggregator.aggregate_train(server_round, replies)
    except Exception as err:  # a strategy's failure costs the round, never the run
        return None, f"{name}.aggregate_train raised {type(err).__name__}: {first_line(err)}"
    if record is None:
        return None, f"{name}.aggregate_train returned no model from {len(models)} uploads"
    out = numpy_arrays(record)
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

    A fresh instance must take ``aggregator-params``, need no more than ``num_devices`` uploads,
    aggregate a synthetic round into a model, and change only state a checkpoint holds. Raises
    ValueError (one line naming the setting, the value and what is allowed).
    """
    aggregator = make_aggregator(setting, params, num_devices)
    if aggregator is None:
        return
    need, why = uploads_needed(aggregator)
    if need > num_devices:
        raise ValueError(
            f"run-config key {AGGREGATOR_KEY!r} = {setting!r} with {PARAMS_KEY} = "
            f"{dict(params)!r}: {why}, more than num-devices = {num_devices}; lower "
            "num-malicious-nodes or add devices"
        )
    reference, models = synthetic_uploads(max(need, 3))
    fresh = snapshot(aggregator)
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
    check_declared_state(aggregator, fresh, setting)
