"""The Flower Strategy: one scheduled round of wireless FL (paper Alg. 3, DESIGN.md "One round").

Each round :meth:`ScheduledStrategy.configure_train`

1. learns the partition id of nodes it has not seen yet (``query.info``),
2. draws this round's channel (availability, LOS, shadowing, gain, B*) from the cell,
3. either queries the available devices for pre-training statistics (``query.stats``: σ̂_v,
   label histogram), schedules with the policy and returns ``train`` messages for the
   scheduled devices only (protocol ``"query"``), or returns ``train`` messages for every
   available device (protocol ``"train-all"``, needed by rules that rank on post-training
   values: BN2, POC);

and :meth:`ScheduledStrategy.aggregate_train` validates the replies, (for ``"train-all"``)
schedules now, averages the scheduled devices' models with FedAvg weights |D_v|, lets the
policy update Ĝ from the uploads, and emits one :class:`RoundRecord`.

A device whose reply is an error, times out, or is malformed is excluded for the round with
a warning; the round goes on. A round with nothing scheduled keeps the model and says so.
The scheduling math lives in pure modules (:mod:`fedcgd_strategy.policies` and below).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from logging import INFO, WARNING
from typing import Any, Protocol

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log
from numpy.typing import NDArray

from channel import RoundDraw
from fedcgd_strategy import keys
from fedcgd_strategy.aggregation import fedavg, flatten_update
from fedcgd_strategy.policies import Decision, Policy, RoundInputs, UploadedUpdates
from fedcgd_strategy.problem import SchedulingProblem
from fedcgd_strategy.replies import DeviceReport, MalformedReplyError, read_report

#: Allowed values of the ``protocol`` argument.
PROTOCOLS = ("query", "train-all")


class ChannelModel(Protocol):
    """What the strategy needs from a cell: one channel draw per round."""

    def draw_round(self, model_bits: float) -> RoundDraw:
        """Draw availability, gains and minimum bandwidths for this round."""
        ...


@dataclass
class RoundRecord:
    """What happened in one round (one JSON line of the run's metrics file).

    Attributes mirror the metrics-file columns; arrays are plain lists of partition ids.
    """

    round: int
    num_available: int
    num_candidates: int
    num_feasible: int
    num_scheduled: int
    num_uploaded: int
    scheduled: list[int]
    uploaded: list[int]
    failed: list[int]
    wemd: float
    sampling_term: float
    objective: float
    sigma: float
    class_gradient_used: float | list[float]
    class_gradient_next: float | list[float] | None
    bandwidth_used_hz: float
    solver_iterations: int
    query_s: float
    schedule_s: float
    train_phase_s: float
    aggregate_s: float
    client_train_s: float
    model_kept: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)


@dataclass
class _RoundState:
    draw: RoundDraw
    reference: dict[str, NDArray[np.generic]]
    available: list[int]
    t_start: float
    query_s: float = 0.0
    schedule_s: float = 0.0
    t_sent: float = 0.0
    decision: Decision | None = None
    inputs: RoundInputs | None = None
    failed: list[int] = field(default_factory=list)


class ScheduledStrategy(Strategy):
    """Device scheduling over a simulated uplink, aggregation of the scheduled devices only.

    With an ideal channel (every device available, B* = 0) and a policy that schedules every
    device (``"all"``, or FedCGD with Ĝ = 0), one round equals FedAvg over all devices.

    Parameters
    ----------
    policy : Policy
        The scheduling rule (see :func:`fedcgd_strategy.policies.make_policy`).
    cell : ChannelModel
        The uplink model (a :class:`channel.Cell`), drawn once per round.
    model_bits : float
        D_w, bits uploaded per device.
    total_bandwidth_hz : float
        Bandwidth budget B.
    num_devices, num_classes : int
        V and C.
    target_dist : float[C] or None
        WEMD target p; ``None`` = the class distribution of the union of this round's reported
        histograms (the ``"devices"`` option).
    protocol : str
        ``"query"`` (pre-training statistics, only the scheduled devices train) or
        ``"train-all"`` (every available device trains, only the scheduled ones are aggregated).
    local_steps, learning_rate, batch_size : int, float, int
        τ, η and b, sent to the clients every round.
    rng : numpy.random.Generator
        Randomness of the policy (CD start, POC candidates, Fed-CBS sampling).
    query_timeout_s : float
        How long to wait for ``query.info`` / ``query.stats`` replies.
    on_round : callable, optional
        Called with each round's :class:`RoundRecord` at the end of :meth:`aggregate_train`.

    """

    def __init__(
        self,
        *,
        policy: Policy,
        cell: ChannelModel,
        model_bits: float,
        total_bandwidth_hz: float,
        num_devices: int,
        num_classes: int,
        target_dist: NDArray[np.float64] | None,
        protocol: str,
        local_steps: int,
        learning_rate: float,
        batch_size: int,
        rng: np.random.Generator,
        query_timeout_s: float = 120.0,
        on_round: Callable[[RoundRecord], None] | None = None,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol: got {protocol!r}; allowed: {', '.join(PROTOCOLS)}")
        if policy.needs_post_training and protocol != "train-all":
            raise ValueError(
                f"protocol: policy {policy.name!r} ranks devices on post-training values and "
                f"needs protocol 'train-all', got {protocol!r}"
            )
        self.policy = policy
        self.cell = cell
        self.model_bits = float(model_bits)
        self.total_bandwidth_hz = float(total_bandwidth_hz)
        self.num_devices = int(num_devices)
        self.num_classes = int(num_classes)
        self.target_dist = None if target_dist is None else np.asarray(target_dist, float)
        self.protocol = protocol
        self.local_steps = int(local_steps)
        self.learning_rate = float(learning_rate)
        self.batch_size = int(batch_size)
        self.rng = rng
        self.query_timeout_s = float(query_timeout_s)
        self.on_round = on_round
        self.node_of: dict[int, int] = {}
        self.partition_of: dict[int, int] = {}
        self._state: _RoundState | None = None

    # ----------------------------------------------------------------------------- helpers
    def summary(self) -> None:
        """Log the hyper-parameters once."""
        log(
            INFO,
            "ScheduledStrategy: policy=%s protocol=%s V=%d C=%d B=%.3g Hz D_w=%.0f bit "
            "tau=%d eta=%g b=%d",
            self.policy.name,
            self.protocol,
            self.num_devices,
            self.num_classes,
            self.total_bandwidth_hz,
            self.model_bits,
            self.local_steps,
            self.learning_rate,
            self.batch_size,
        )

    def _content(self, server_round: int, arrays: ArrayRecord | None) -> RecordDict:
        config = ConfigRecord(
            {
                keys.SERVER_ROUND: server_round,
                keys.LOCAL_STEPS: self.local_steps,
                keys.LEARNING_RATE: self.learning_rate,
                keys.BATCH_SIZE: self.batch_size,
            }
        )
        if arrays is None:
            return RecordDict({keys.CONFIG: config})
        return RecordDict({keys.ARRAYS: arrays, keys.CONFIG: config})

    def _messages(
        self, content: RecordDict, partitions: Iterable[int], message_type: str, server_round: int
    ) -> list[Message]:
        return [
            Message(
                content=content,
                dst_node_id=self.node_of[pid],
                message_type=message_type,
                group_id=str(server_round),
            )
            for pid in partitions
        ]

    def discover(self, grid: Grid, server_round: int) -> None:
        """Learn the partition id of every connected node not seen before (``query.info``).

        The server cannot read a node's node_config, so each node reports its partition id.
        Nodes that do not answer stay unknown (never scheduled) and are asked again next round.
        """
        connected = set(grid.get_node_ids())
        for gone in [n for n in self.partition_of if n not in connected]:
            lost = self.partition_of.pop(gone)
            self.node_of.pop(lost, None)
            log(WARNING, "node %d (partition %d) disconnected", gone, lost)
        unknown = sorted(connected - set(self.partition_of))
        if not unknown:
            return
        content = self._content(server_round, None)
        msgs = [
            Message(
                content=content,
                dst_node_id=node,
                message_type=keys.QUERY_INFO,
                group_id=str(server_round),
            )
            for node in unknown
        ]
        for reply in grid.send_and_receive(msgs, timeout=self.query_timeout_s):
            node = int(reply.metadata.src_node_id)
            try:
                if reply.has_error():
                    raise MalformedReplyError(f"error reply: {reply.error.reason}")
                metrics = reply.content.metric_records[keys.METRICS]
                pid = metrics[keys.PARTITION_ID]
                if not isinstance(pid, int) or not 0 <= pid < self.num_devices:
                    raise MalformedReplyError(
                        f"{keys.PARTITION_ID!r} = {pid!r}; allowed: an int in "
                        f"[0, {self.num_devices})"
                    )
            except (MalformedReplyError, KeyError) as err:
                log(WARNING, "node %d: discovery failed (%s); asked again next round", node, err)
                continue
            if pid in self.node_of and self.node_of[pid] != node:
                log(
                    WARNING,
                    "nodes %d and %d both claim partition %d; keeping %d",
                    self.node_of[pid],
                    node,
                    pid,
                    self.node_of[pid],
                )
                continue
            self.node_of[pid] = node
            self.partition_of[node] = pid
        log(INFO, "discovery: %d of %d devices have a node", len(self.node_of), self.num_devices)

    def _read(
        self,
        replies: Iterable[Message],
        expected: Iterable[int],
        reference: Mapping[str, NDArray[np.generic]] | None,
        what: str,
    ) -> tuple[list[DeviceReport], list[int]]:
        reports: dict[int, DeviceReport] = {}
        for msg in replies:
            try:
                report = read_report(
                    msg,
                    num_devices=self.num_devices,
                    num_classes=self.num_classes,
                    reference=reference,
                )
            except MalformedReplyError as err:
                log(WARNING, "%s: device excluded this round: %s", what, err)
                continue
            if self.partition_of.get(report.node_id) != report.partition_id:
                log(
                    WARNING,
                    "%s: node %d reported partition %d but is registered as %s; excluded",
                    what,
                    report.node_id,
                    report.partition_id,
                    self.partition_of.get(report.node_id),
                )
                continue
            reports[report.partition_id] = report
        failed = sorted(set(expected) - set(reports))
        log(INFO, "%s: received %d results and %d failures", what, len(reports), len(failed))
        if failed:
            log(WARNING, "%s: no valid reply from devices %s (excluded this round)", what, failed)
        return [reports[p] for p in sorted(reports)], failed

    def round_inputs(self, draw: RoundDraw, reports: list[DeviceReport]) -> RoundInputs:
        """Assemble the policy's view of the round from the channel draw and the reports."""
        V, C = self.num_devices, self.num_classes
        candidate = np.zeros(V, dtype=bool)
        label_dist = np.zeros((V, C))
        num_examples = np.zeros(V)
        sigma_v = np.zeros(V)
        post = self.protocol == "train-all"
        train_loss = np.full(V, np.nan) if post else None
        update_norm = np.full(V, np.nan) if post else None
        for r in reports:
            v = r.partition_id
            candidate[v] = True
            label_dist[v] = r.label_dist
            num_examples[v] = r.num_examples
            sigma_v[v] = r.sigma
            if train_loss is not None and r.train_loss is not None:
                train_loss[v] = r.train_loss
            if update_norm is not None and r.update_norm is not None:
                update_norm[v] = r.update_norm
        if self.target_dist is not None:
            target = self.target_dist
        elif reports:
            total = np.sum([r.label_hist for r in reports], axis=0).astype(float)
            target = total / total.sum()
        else:
            target = np.full(C, 1.0 / C)
        return RoundInputs(
            candidate=candidate,
            label_dist=label_dist,
            num_examples=num_examples,
            sigma_v=sigma_v,
            min_bandwidth_hz=np.asarray(draw.min_bandwidth_hz, dtype=float),
            gain_lin=np.asarray(draw.gain_lin, dtype=float),
            total_bandwidth_hz=self.total_bandwidth_hz,
            batch_size=self.batch_size,
            target_dist=target,
            train_loss=train_loss,
            update_norm=update_norm,
        )

    def _schedule(self, state: _RoundState, reports: list[DeviceReport]) -> Decision:
        t0 = time.perf_counter()
        state.inputs = self.round_inputs(state.draw, reports)
        state.decision = self.policy.schedule(state.inputs, self.rng)
        state.schedule_s = time.perf_counter() - t0
        log(
            INFO,
            "round: scheduled %d of %d candidates (%d available)",
            int(state.decision.selected.sum()),
            int(state.inputs.candidate.sum()),
            len(state.available),
        )
        return state.decision

    # ---------------------------------------------------------------------- Strategy API
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Draw the channel, (query and) schedule, and address the devices that train."""
        t_start = time.perf_counter()
        self.discover(grid, server_round)
        draw = self.cell.draw_round(self.model_bits)
        available = [v for v in range(self.num_devices) if draw.available[v] and v in self.node_of]
        reference = {k: v.numpy() for k, v in arrays.items()}
        state = _RoundState(draw, reference, available, t_start)
        self._state = state
        content = self._content(server_round, arrays)
        if self.protocol == "train-all":
            state.t_sent = time.perf_counter()
            return self._messages(content, available, MessageType.TRAIN, server_round)

        t0 = time.perf_counter()
        replies = grid.send_and_receive(
            self._messages(content, available, keys.QUERY_STATS, server_round),
            timeout=self.query_timeout_s,
        )
        reports, state.failed = self._read(replies, available, None, "query.stats")
        state.query_s = time.perf_counter() - t0
        decision = self._schedule(state, reports)
        state.t_sent = time.perf_counter()
        return self._messages(
            content, np.flatnonzero(decision.selected).tolist(), MessageType.TRAIN, server_round
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate replies, (schedule,) average the scheduled models, update Ĝ, log the round."""
        state = self._state
        if state is None:
            raise RuntimeError("aggregate_train called before configure_train")
        t_recv = time.perf_counter()
        expected = (
            state.available
            if self.protocol == "train-all"
            else np.flatnonzero(state.decision.selected).tolist()  # type: ignore[union-attr]
        )
        reports, failed = self._read(replies, expected, state.reference, MessageType.TRAIN)
        state.failed = sorted(set(state.failed) | set(failed))
        if self.protocol == "train-all":
            self._schedule(state, reports)
        decision, inputs = state.decision, state.inputs
        assert decision is not None and inputs is not None
        uploads = [r for r in reports if decision.selected[r.partition_id]]

        t0 = time.perf_counter()
        new_arrays: ArrayRecord | None = None
        if uploads:
            averaged = fedavg([r.arrays or {} for r in uploads], [r.num_examples for r in uploads])
            new_arrays = ArrayRecord(
                {k: Array(np.ascontiguousarray(v)) for k, v in averaged.items()}
            )
            self.policy.observe_uploads(
                UploadedUpdates(
                    updates=np.stack(
                        [flatten_update(r.arrays or {}, state.reference) for r in uploads]
                    ),
                    weights=np.array([r.num_examples for r in uploads], dtype=float),
                    label_dist=np.stack([r.label_dist for r in uploads]),
                    target_dist=inputs.target_dist,
                    learning_rate=self.learning_rate,
                    local_steps=self.local_steps,
                )
            )
        else:
            log(
                WARNING,
                "round %d: nothing scheduled or uploaded; the global model is kept",
                server_round,
            )
        aggregate_s = time.perf_counter() - t0

        record = self._record(server_round, state, reports, uploads, aggregate_s, t_recv)
        if self.on_round is not None:
            self.on_round(record)
        metrics = MetricRecord(
            {
                "num-scheduled": record.num_scheduled,
                "num-uploaded": record.num_uploaded,
                "wemd": record.wemd,
                "sigma": record.sigma,
            }
        )
        return new_arrays, metrics

    def _record(
        self,
        server_round: int,
        state: _RoundState,
        reports: list[DeviceReport],
        uploads: list[DeviceReport],
        aggregate_s: float,
        t_recv: float,
    ) -> RoundRecord:
        decision, inputs = state.decision, state.inputs
        assert decision is not None and inputs is not None
        selected = decision.selected
        cand = np.flatnonzero(inputs.candidate)
        wemd = sampling = objective = float("nan")
        if cand.size and selected.any():
            # The schedule's plain WEMD (G = 1, comparable with the paper's Table II) and its
            # sampling term, evaluated by the same P1 definitions the solvers use.
            problem = SchedulingProblem(
                label_dist=inputs.label_dist[cand],
                target_dist=inputs.target_dist,
                min_bandwidth_hz=np.where(
                    np.isfinite(inputs.min_bandwidth_hz[cand]), inputs.min_bandwidth_hz[cand], 0.0
                ),
                total_bandwidth_hz=self.total_bandwidth_hz,
                sigma=decision.sigma,
                class_gradient=1.0,
                batch_size=self.batch_size,
            )
            mask = selected[cand]
            wemd = float(problem.wemd(mask))
            sampling = float(problem.sampling_term(mask))
            objective = float(decision.solver_objective)
        bw = inputs.min_bandwidth_hz[selected]
        g_state = self.policy.state_dict().get("class-gradient")
        g_next: float | list[float] | None = None
        if isinstance(g_state, list):
            values = [float(v) for v in g_state]
            g_next = values[0] if len(values) == 1 else values
        return RoundRecord(
            round=server_round,
            num_available=len(state.available),
            num_candidates=int(inputs.candidate.sum()),
            num_feasible=int(np.sum(inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))),
            num_scheduled=int(selected.sum()),
            num_uploaded=len(uploads),
            scheduled=np.flatnonzero(selected).tolist(),
            uploaded=[r.partition_id for r in uploads],
            failed=state.failed,
            wemd=wemd,
            sampling_term=sampling,
            objective=objective,
            sigma=float(decision.sigma),
            class_gradient_used=decision.class_gradient,
            class_gradient_next=g_next,
            bandwidth_used_hz=float(np.sum(bw[np.isfinite(bw)])),
            solver_iterations=decision.solver_iterations,
            query_s=state.query_s,
            schedule_s=state.schedule_s,
            train_phase_s=t_recv - state.t_sent,
            aggregate_s=aggregate_s,
            client_train_s=float(sum(r.train_time_s or 0.0 for r in reports)),
            model_kept=not uploads,
        )

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No federated evaluation: the ServerApp evaluates the global model centrally."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Nothing to aggregate (see :meth:`configure_evaluate`)."""
        return None
