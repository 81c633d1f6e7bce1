"""The Flower Strategy: one scheduled round of wireless FL (Alg. 3; docs/design.md, "One round"),
translating Messages to the policy's arrays and back; the rules are pure functions elsewhere."""  # noqa: D205, D209

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log
from numpy.typing import NDArray

from channel import ChannelModel, RoundDraw
from fedcgd_config import keys
from fedcgd_config.settings import TrainingSettings, read_round_config
from fedcgd_strategy.aggregation import fedavg, flatten_update, non_finite_arrays
from fedcgd_strategy.errors import OneLineMessage
from fedcgd_strategy.flower.aggregators import aggregate_uploads, array_record, dp_round_noise
from fedcgd_strategy.flower.discovery import (
    discover_nodes,
    messages,
    record_unanswered,
    send_tracked,
    settle_pending,
)
from fedcgd_strategy.flower.replies import DeviceReport, collect_reports
from fedcgd_strategy.flower.simulation import stall_progress
from fedcgd_strategy.nodes import NodeRegistry, PendingMessages
from fedcgd_strategy.policies import (
    Decision,
    Policy,
    Protocol,
    RoundInputs,
    UploadedUpdates,
    policy_call,
    resolve_protocol,
    round_inputs,
    schedule_checked,
    with_reported_terms,
)
from fedcgd_strategy.record import RoundRecord, class_gradient_value
from fedcgd_task.model_record import model_record


class ChannelDrawError(OneLineMessage, ValueError):
    """A channel's round draw that does not have one entry per device of the run."""


@dataclass
class RoundInProgress:
    """What ``configure_train`` leaves for ``aggregate_train`` of the same round."""

    draw: RoundDraw
    training: TrainingSettings
    reference: dict[str, NDArray[np.generic]]  # the global model sent this round
    available: list[int]
    server_round: int = 0
    t_sent: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # the record's *_s, as measured
    inputs: RoundInputs | None = None
    decision: Decision | None = None
    failed: dict[int, str] = field(default_factory=dict)
    discovery_failed: dict[int, str] = field(default_factory=dict)
    busy: dict[int, int] = field(default_factory=dict)
    trainees: list[int] = field(default_factory=list)
    sent: list[Message] = field(default_factory=list)
    lost: set[int] = field(default_factory=set)
    dp_noise: tuple[float, float] | None = None

    @property
    def reachable(self) -> list[int]:
        """Available devices not busy with an earlier, unanswered message."""
        return [v for v in self.available if v not in self.busy]

    def record(
        self, decision: Decision, uploads: list[DeviceReport], disconnected: set[int],
        class_gradient_next: NDArray[np.float64] | None, kept_reason: str | None,
    ) -> RoundRecord:  # fmt: skip
        """The round's :class:`RoundRecord` (fields: docs/running.md)."""
        inputs, selected, solver = self.inputs, decision.selected, decision.solver
        assert inputs is not None
        lost = self.lost | disconnected
        clipping_norm, noise_std = self.dp_noise or (None, None)
        return RoundRecord(
            round=self.server_round,
            num_available=len(self.available),
            num_candidates=int(inputs.candidate.sum()),
            num_feasible=int(np.sum(inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))),
            num_scheduled=int(selected.sum()),
            num_uploaded=len(uploads),
            scheduled=np.flatnonzero(selected).tolist(),
            uploaded=[r.partition_id for r in uploads],
            failed=sorted(self.failed),
            disconnected=sorted(disconnected),
            wemd=decision.wemd,
            sampling_term=decision.sampling_term,
            objective=float(solver.objective)
            if solver is not None and selected.any()
            else math.nan,
            sigma=float(decision.sigma),
            class_gradient_used=class_gradient_value(decision.class_gradient),
            class_gradient_next=class_gradient_value(class_gradient_next),
            bandwidth_used_hz=decision.bandwidth_used_hz,
            solver_iterations=int(solver.iterations) if solver is not None else 0,
            **self.timings,
            model_kept=kept_reason is not None,
            failed_reasons={str(k): self.failed[k] for k in sorted(self.failed)},
            model_kept_reason=kept_reason,
            discovery_failed={str(k): v for k, v in sorted(self.discovery_failed.items())},
            devices_lost=len(lost),
            lost=sorted(lost),
            dp_clipping_norm=clipping_norm,
            dp_noise_std=noise_std,
        )


@dataclass(eq=False, kw_only=True)
class ScheduledStrategy(Strategy):
    """Device scheduling over a simulated uplink, aggregation of the scheduled devices only.

    ``cell`` draws each round's channel (D_w = ``model_bits``, B = ``total_bandwidth_hz``);
    ``target_dist`` the WEMD target p (None: the reports' union); ``round_offset`` the rounds a
    resumed run has done; ``partition_counts`` int[V, C] is checked at discovery; ``aggregator``
    combines the uploads (None: FedAvg), ``seed`` seeds its noise.
    """

    policy: Policy
    cell: ChannelModel
    model_bits: float
    total_bandwidth_hz: float
    num_devices: int
    num_classes: int
    target_dist: NDArray[np.float64] | None
    rng: np.random.Generator
    max_update_norm_ratio: float
    protocol: str = "auto"
    query_timeout_s: float = 120.0
    round_offset: int = 0
    partition_counts: NDArray[np.int64] | None = None
    on_record: Callable[[RoundRecord], None] | None = None
    aggregator: Strategy | None = None
    seed: int = 0
    last_record: RoundRecord | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.protocol = resolve_protocol(type(self.policy), self.protocol, self.policy.name)
        self.model_bits = float(self.model_bits)
        self.total_bandwidth_hz = float(self.total_bandwidth_hz)
        if self.target_dist is not None:
            self.target_dist = np.asarray(self.target_dist, float)
        self.registry = NodeRegistry(self.num_devices, self.num_classes, self.partition_counts)
        self.pending = PendingMessages()  # at most one message per node in flight
        self._norm_reference: float | None = None  # median accepted update norm, last round
        self._round: RoundInProgress | None = None

    def summary(self) -> None:
        """Log the hyper-parameters once."""
        log(INFO, "ScheduledStrategy: policy=%s protocol=%s V=%d C=%d B=%.3g Hz D_w=%.0f bit",
            self.policy.name, self.protocol, self.num_devices, self.num_classes,
            self.total_bandwidth_hz, self.model_bits)  # fmt: skip

    def _send(
        self, wire: ArrayRecord, config: dict[str, Any], to: list[int], kind: str, sigma: bool
    ) -> list[Message]:
        """One message per partition id in ``to`` (its node) carrying the model's ``wire``
        record (:func:`~fedcgd_task.model_record.model_record`), ``want-sigma`` = ``sigma``."""  # noqa: D205, D209
        record = ConfigRecord({**config, keys.WANT_SIGMA: sigma})
        content = RecordDict({keys.ARRAYS: wire, keys.CONFIG: record})
        return messages(content, map(self.registry.node, to), kind, config[keys.SERVER_ROUND])

    def _inputs(self, state: RoundInProgress, reports: list[DeviceReport] | None) -> RoundInputs:
        """The policy's view: from the reports, or (``reports=None``) from the channel only."""
        return round_inputs(
            available=np.isin(np.arange(self.num_devices), state.reachable),
            min_bandwidth_hz=state.draw.min_bandwidth_hz, gain_lin=state.draw.gain_lin,
            total_bandwidth_hz=self.total_bandwidth_hz, batch_size=state.training.batch_size,
            num_classes=self.num_classes, target_dist=self.target_dist, reports=reports,
            post_training=self.protocol is Protocol.TRAIN_ALL,
            local_counts=self.registry.local_counts(),
        )  # fmt: skip

    def _schedule(self, state: RoundInProgress, reports: list[DeviceReport] | None) -> Decision:
        t0 = time.perf_counter()
        inputs = self._inputs(state, reports)
        # the round fails here, in one line, if the schedule breaks the physics
        decision = schedule_checked(self.policy, inputs, self.rng, server_round=state.server_round)
        state.inputs, state.decision = inputs, decision
        stall_progress()
        state.timings["schedule_s"] = time.perf_counter() - t0
        scheduled, candidates = int(decision.selected.sum()), int(inputs.candidate.sum())
        log(INFO, "round: scheduled %d of %d candidates", scheduled, candidates)
        return decision

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Settle late replies, discover nodes, draw the channel, choose the trainees, send."""
        stall_progress()  # a new round (after the last one's evaluation)
        server_round += self.round_offset
        round_config = {**dict(config.items()), keys.SERVER_ROUND: server_round}
        _, training, _ = read_round_config(round_config)
        late = settle_pending(grid, self.pending, wait_s=self.query_timeout_s)
        t0 = time.perf_counter()
        discovery_failed = discover_nodes(
            grid, self.registry, server_round, self.query_timeout_s, self.pending, late
        )
        discovery_s = time.perf_counter() - t0
        draw = self.cell.draw_round(self.model_bits)
        if draw.available.shape != (self.num_devices,):
            where = Path(inspect.getfile(type(self.cell))).name
            raise ChannelDrawError(
                f"round {server_round}: channel {type(self.cell).__qualname__}.draw_round "
                f"({where}) drew {draw.available.size} devices; the run has num-devices = "
                f"{self.num_devices} (one entry per device)"
            )
        state = RoundInProgress(
            draw=draw, training=training, reference={k: v.numpy() for k, v in arrays.items()},
            available=self.registry.with_node(draw.available), server_round=server_round,
            discovery_failed=discovery_failed,
            timings={"query_s": 0.0, "discovery_s": discovery_s},
        )  # fmt: skip
        self._round = state
        for node, since in self.pending.busy_nodes().items():  # its node still owes a reply
            if (pid := self.registry.partition(node)) is not None and pid in state.available:
                state.busy[pid] = since
                state.failed[pid] = f"busy: its message of round {since} is still unanswered"
                state.lost.add(pid)  # to the timeout of its unanswered message
        wire = model_record(state.reference)  # one record a round: every message shares it
        state.trainees = self._trainees(state, wire, round_config, grid)
        sigma = self.policy.needs_sigma and self.protocol is Protocol.TRAIN_ALL
        state.t_sent = time.perf_counter()
        state.sent = self._send(wire, round_config, state.trainees, MessageType.TRAIN, sigma)
        return state.sent

    def _trainees(
        self, state: RoundInProgress, wire: ArrayRecord, round_config: dict[str, Any], grid: Grid
    ) -> list[int]:
        """The partitions that train this round (by the protocol)."""
        if self.protocol is Protocol.CHANNEL:
            return np.flatnonzero(self._schedule(state, None).selected).tolist()
        if self.protocol is not Protocol.QUERY:
            return state.reachable
        t0, asked, rnd = time.perf_counter(), state.reachable, state.server_round
        queries = self._send(wire, round_config, asked, keys.QUERY_STATS, self.policy.needs_sigma)
        replies = send_tracked(grid, queries, self.query_timeout_s, self.pending, rnd)
        reports = self._collect(replies, asked, state, keys.QUERY_STATS)
        state.timings["query_s"] = time.perf_counter() - t0
        return np.flatnonzero(self._schedule(state, reports).selected).tolist()

    def _collect(
        self, replies: list[Message], expected: list[int], state: RoundInProgress, phase: str
    ) -> list[DeviceReport]:
        """Validate a phase's replies; the lost and refused go to ``state.lost``, ``.failed``."""
        training = phase == MessageType.TRAIN
        reports, failed, lost = collect_reports(
            replies, expected, self.registry, state.reference if training else None, phase,
            num_samples=state.training.local_steps * state.training.batch_size,
            max_update_norm_ratio=self.max_update_norm_ratio, norm_reference=self._norm_reference,
        )  # fmt: skip
        state.lost |= lost
        state.failed.update(failed)
        if training:
            norms = [r.upload_norm for r in reports if r.upload_norm is not None]
            self._norm_reference = float(np.median(norms)) if norms else self._norm_reference
        return reports

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Validate replies, (schedule,) average the scheduled models, update Ĝ, record."""
        stall_progress()  # the training replies are in
        server_round += self.round_offset
        state, t_recv, replies = self._round, time.perf_counter(), list(replies)
        assert state is not None, "aggregate_train called before configure_train"
        record_unanswered(self.pending, state.sent, replies, server_round)
        reports = self._collect(replies, state.trainees, state, MessageType.TRAIN)
        trained_first = self.protocol is Protocol.TRAIN_ALL  # every reachable device trained
        decision = self._schedule(state, reports) if trained_first else state.decision
        assert decision is not None and state.inputs is not None
        if self.protocol is Protocol.CHANNEL:  # the record's numbers: from the training replies
            decision = with_reported_terms(decision, self._inputs(state, reports))
        uploads = [r for r in reports if decision.selected[r.partition_id]]
        disconnected = set(np.flatnonzero(state.draw.available).tolist()) - set(state.available)

        t0 = time.perf_counter()
        new_arrays, kept_reason = self._aggregate(uploads, state)
        stall_progress()
        if new_arrays is None:
            log(WARNING, "round %d: %s; the global model is kept", server_round, kept_reason)
        train_s = float(sum(r.train_time_s or 0.0 for r in reports))
        state.timings |= {"aggregate_s": time.perf_counter() - t0, "client_train_s": train_s}
        state.timings["train_phase_s"] = t_recv - state.t_sent

        class_gradient = policy_call(
            self.policy, server_round, "its class_gradient", lambda: self.policy.class_gradient
        )
        self.last_record = record = state.record(
            decision, uploads, disconnected, class_gradient, kept_reason
        )
        if self.on_record is not None:
            self.on_record(record)
        scheduled = {"num-scheduled": record.num_scheduled, "num-uploaded": len(uploads)}
        return new_arrays, MetricRecord({**scheduled, "wemd": record.wemd})

    def _aggregate(
        self, uploads: list[DeviceReport], state: RoundInProgress
    ) -> tuple[ArrayRecord | None, str | None]:
        """Aggregate the uploads (weights |D_v|), hand the updates to the policy for Ĝ; the new
        model, or None and why the model is kept (then Ĝ is not updated)."""  # noqa: D205, D209
        if not uploads:
            return None, "nothing uploaded"
        weights = [r.num_examples for r in uploads]
        models = [r.arrays or {} for r in uploads]
        if self.aggregator is None:
            averaged = fedavg(models, weights, state.reference)
        else:
            noise = dp_round_noise(self.aggregator, len(models))
            combined, reason = aggregate_uploads(
                self.aggregator, state.server_round, models, weights, state.reference,
                [r.node_id for r in uploads], seed=self.seed,
            )  # fmt: skip
            if combined is None:
                return None, reason
            averaged, state.dp_noise = combined, noise
        if bad := non_finite_arrays(averaged):
            return None, f"the aggregate of {len(uploads)} uploads is not finite in {bad[:3]}"
        assert state.inputs is not None  # the Ĝ update's inputs (eqs. G_est, Gc_est)
        updates = UploadedUpdates(
            updates=np.stack([flatten_update(r.arrays or {}, state.reference) for r in uploads]),
            weights=np.array(weights, dtype=float),
            label_dist=np.stack([r.label_hist / float(r.label_hist.sum()) for r in uploads]),
            target_dist=state.inputs.target_dist,
            learning_rate=state.training.learning_rate,
            local_steps=state.training.local_steps,
        )
        observe = partial(self.policy.observe_uploads, updates)
        policy_call(self.policy, state.server_round, "observe_uploads()", observe)
        return array_record(averaged), None

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
