"""Flower strategies as aggregators of the scheduled uploads (run-config ``aggregator``).

``""`` keeps the scheduler's FedAvg (:func:`fedcgd_strategy.aggregation.fedavg`); a named
strategy (aggregator_params.py) combines the round's validated uploads in its own
``aggregate_train``. How Flower's interface is adapted, server-side DP included: docs/design.md,
"Any Flower aggregation" and "Server-side differential privacy". Its state: aggregator_state.py.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy
from flwr.supercore.logger import FLOWER_LOGGER
from flwr.supercore.task_identity import TaskIdentity
from numpy.typing import NDArray

from fedcgd_strategy.aggregation import non_finite_arrays
from fedcgd_strategy.flower.aggregator_params import (
    AGGREGATOR_KEY,
    INNER,
    PARAMS_KEY,
    SERVER_SIDE_DP,
    build,
    minimum_uploads,
)
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
from fedcgd_task.imports import first_line

Arrays = Mapping[str, NDArray[np.generic]]


#: Stream tag of the noise's seed (mixed with the run seed and the round): "NOIS".
NOISE_STREAM = 0x4E4F4953


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
    return None if setting == "" else build(setting, params, num_devices)[0]


def resolved_aggregator(
    setting: str, params: Mapping[str, object], num_devices: int
) -> dict[str, object] | None:
    """``config.json``'s ``aggregator_resolved`` (None for the scheduler's FedAvg)."""
    if setting == "":
        return None
    with _flower_log(logging.ERROR):  # logged when the run's aggregator was built
        return build(setting, params, num_devices)[1]


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
