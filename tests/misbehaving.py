"""A ClientApp wrapper in which one device misbehaves as :data:`FAULTS` says (robustness tests).

In process, :func:`misbehaving` wraps every node's handler. Under ``flwr run``
(``wrapped_project``) the app is ``misbehaving:app``, set by ``FEDCGD_FAULT=<name>``,
``FEDCGD_FAULT_PARTITION=<id>`` (and ``FEDCGD_FAULT_CLAIM``, ``FEDCGD_FAULT_SLEEP_S``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from client_app.device_round import device_round, process_model
from fedcgd_config import keys
from fedcgd_strategy.flower.replies import update_norm
from fedcgd_task.model_record import layout, model_arrays, model_record

Handler = Callable[[Message, Context], Message]
#: (reply, request, node's context) -> the corrupted reply.
Corrupt = Callable[[Message, Message, Context], Message]

STATS = (keys.QUERY_STATS, "train")
TRAIN = ("train",)
EVERY = (keys.QUERY_INFO, keys.QUERY_STATS, "train")


@dataclass(frozen=True)
class Fault:
    """The message ``kinds`` whose replies it corrupts, how (None: raise) and ``what`` it does."""

    kinds: tuple[str, ...]
    corrupt: Corrupt | None
    what: str


def _metrics(reply: Message) -> MetricRecord:
    return reply.content.metric_records[keys.METRICS]


def _set_metric(key: str, value: object) -> Corrupt:
    def corrupt(reply: Message, request: Message, context: Context) -> Message:
        _metrics(reply)[key] = value  # type: ignore[assignment]
        return reply

    return corrupt


def _map_hist(fn: Callable[[list[int], Message], list]) -> Corrupt:
    def corrupt(reply: Message, request: Message, context: Context) -> Message:
        metrics = _metrics(reply)
        hist = metrics[keys.LABEL_HIST]
        assert isinstance(hist, list)
        metrics[keys.LABEL_HIST] = fn([int(c) for c in hist], request)
        return reply

    return corrupt


def _uniform_hist(hist: list[int], request: Message) -> list[int]:
    """Integers summing to τ b, as even as possible over the classes (a plausible lie)."""
    config = request.content.config_records[keys.CONFIG]
    steps, batch = config["local-steps"], config["batch-size"]
    assert isinstance(steps, int) and isinstance(batch, int)
    total = steps * batch
    base, extra = divmod(total, len(hist))
    return [base + (1 if c < extra else 0) for c in range(len(hist))]


def _map_arrays(fn: Callable[[int, np.ndarray, np.ndarray], np.ndarray]) -> Corrupt:
    """Upload ``fn(position, array, the global model's array)``, reporting its true update norm
    (so that the screening of the upload itself refuses it, not the report's mismatch)."""

    def corrupt(reply: Message, request: Message, context: Context) -> Message:
        rnd = device_round(request, context)
        like = layout(process_model(rnd.settings.model, rnd.split.num_classes,
                                    rnd.split.source.input_shape).state_dict())  # fmt: skip
        sent = model_arrays(request.content.array_records[keys.ARRAYS], like)
        local = model_arrays(reply.content.array_records[keys.ARRAYS], like)
        arrays = {k: fn(i, v, sent[k]) for i, (k, v) in enumerate(local.items())}
        reply.content[keys.ARRAYS] = model_record(arrays)
        with np.errstate(all="ignore"):
            norm = update_norm({k: np.asarray(v, np.float64) for k, v in arrays.items()}, sent)
        _metrics(reply)[keys.UPDATE_NORM] = norm if np.isfinite(norm) else 0.0
        return reply

    return corrupt


def sign_flip(scale: float) -> Corrupt:
    """Upload w + scale (w_v − w), integer buffers as trained (|scale| below
    ``max-update-norm-ratio``: it passes the norm screen)."""

    def flip(i: int, local: np.ndarray, ref: np.ndarray) -> np.ndarray:
        if not np.issubdtype(local.dtype, np.floating):
            return local
        delta = local.astype(np.float64) - ref.astype(np.float64)
        return (ref.astype(np.float64) + scale * delta).astype(local.dtype)

    return _map_arrays(flip)


def _as(dtype: type) -> Callable[[int, np.ndarray, np.ndarray], np.ndarray]:
    return lambda i, a, ref: a.astype(dtype)


def _fill_floats(fill: float, first_only: bool) -> Callable[..., np.ndarray]:
    def fn(i: int, a: np.ndarray, ref: np.ndarray) -> np.ndarray:
        hit = np.issubdtype(a.dtype, np.floating) and (i == 0 or not first_only)
        return np.full_like(a, fill) if hit else a

    return fn


def _claim(reply: Message, request: Message, context: Context) -> Message:
    num = int(context.node_config["num-partitions"])
    own = int(context.node_config["partition-id"])
    claim = int(os.environ.get("FEDCGD_FAULT_CLAIM", (own + 1) % num))
    _metrics(reply)[keys.PARTITION_ID] = claim
    return reply


def _empty(reply: Message, request: Message, context: Context) -> Message:
    return Message(RecordDict(), reply_to=request)


def _sleep(reply: Message, request: Message, context: Context) -> Message:
    """A straggler: answer ``FEDCGD_FAULT_SLEEP_S`` seconds late (default 10)."""
    time.sleep(float(os.environ.get("FEDCGD_FAULT_SLEEP_S", "10")))
    return reply


#: Fault name -> Fault. Array faults corrupt training replies, report faults the stats and
#: training replies, identity faults every reply (query.info included).
FAULTS: dict[str, Fault] = {
    "nan-array": Fault(TRAIN, _map_arrays(_fill_floats(np.nan, True)), "NaN in one layer"),
    "huge-layer": Fault(TRAIN, _map_arrays(_fill_floats(1e30, True)), "1e30 in one layer"),
    "max-float-all": Fault(TRAIN, _map_arrays(_fill_floats(3e38, False)), "3e38 in every array"),
    **{
        f"{t.__name__}-arrays": Fault(TRAIN, _map_arrays(_as(t)), f"every array as {t.__name__}")
        for t in (np.int32, np.float64, np.float16)
    },
    "fractional-hist": Fault(
        STATS, _map_hist(lambda h, r: [0.5] * len(h)), "label histogram [0.5] * C"
    ),
    "hist-x3": Fault(STATS, _map_hist(lambda h, r: [3 * c for c in h]), "label histogram x 3"),
    "fake-uniform-hist": Fault(
        STATS, _map_hist(_uniform_hist), "uniform label histogram summing to tau b"
    ),
    "sigma-1e300": Fault(STATS, _set_metric(keys.SIGMA, 1e300), "sigma-hat = 1e300"),
    "num-examples-1e15": Fault(STATS, _set_metric(keys.NUM_EXAMPLES, 10**15), "|D_v| = 1e15"),
    "lie-update-norm": Fault(
        TRAIN, _set_metric(keys.UPDATE_NORM, 1e3), "reports update norm 1e3 (BN2 ranks by it)"
    ),
    "sign-flip-x5": Fault(
        TRAIN, sign_flip(-5.0), "uploads its update sign-flipped and x5, with its true norm"
    ),
    "claim-partition": Fault(EVERY, _claim, "claims another partition id in every reply"),
    "raising": Fault(EVERY, None, "the handler raises"),
    "empty-reply": Fault(STATS, _empty, "a reply without content"),
    "sleep": Fault(STATS, _sleep, "answers FEDCGD_FAULT_SLEEP_S seconds late (a straggler)"),
}


def misbehaving(handler: Handler, fault: str, partition: int | Collection[int]) -> Handler:
    """``handler`` with the node(s) of ``partition`` misbehaving as ``FAULTS[fault]`` says;
    ``"silent:<fault>"`` (in process): no reply to ``<fault>``'s message types."""
    silent, name = fault.startswith("silent:"), fault.removeprefix("silent:")
    if name not in FAULTS:
        raise ValueError(f"fault {fault!r}; allowed: {', '.join(FAULTS)}, silent:<fault>")
    spec = FAULTS[name]
    faulty = {partition} if isinstance(partition, int) else set(partition)

    def handle(msg: Message, context: Context) -> Message:
        kind = msg.metadata.message_type
        if int(context.node_config["partition-id"]) not in faulty or kind not in spec.kinds:
            return handler(msg, context)
        if silent:
            return None  # type: ignore[return-value]  # InProcessGrid: no reply, a timeout
        if spec.corrupt is None:
            raise RuntimeError(f"misbehaving device {partition}: {spec.what}")
        return spec.corrupt(handler(msg, context), msg, context)

    return handle


def silent_like(handler: Handler, fault: str, partition: int) -> Handler:
    """The oracle of ``fault``: the same device answers nothing where the fault would corrupt."""
    return misbehaving(handler, f"silent:{fault}", partition)


def _from_environment() -> Handler:
    """The real ClientApp, wrapped as ``FEDCGD_FAULT`` / ``FEDCGD_FAULT_PARTITION`` say."""
    from client_app.app import app as real_app

    fault = os.environ.get("FEDCGD_FAULT", "")
    if not fault:
        return real_app
    partition = int(os.environ.get("FEDCGD_FAULT_PARTITION", "0"))
    return misbehaving(real_app, fault, partition)


#: The ClientApp for ``flwr run`` (``clientapp = "misbehaving:app"`` in a wrapped project).
app = ClientApp()


@app.query(keys.QUERY_INFO_ACTION)
@app.query(keys.QUERY_STATS_ACTION)
@app.train()
def handle(msg: Message, context: Context) -> Message:
    """Each message, its reply possibly corrupted."""
    return _from_environment()(msg, context)
