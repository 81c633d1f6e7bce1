"""What a run is built from, in a fixed order from the seed (docs/running.md, "Same seed...")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from logging import WARNING
from typing import Any, cast

import numpy as np
import torch
from flwr.common import log
from flwr.serverapp.strategy import Strategy
from numpy.typing import NDArray
from torch import nn

from channel import Cell, ChannelModel, TraceError, TraceReplay, load_trace
from channel.pathloss import PATHLOSS_MODELS
from channel.report import BITS_PER_PARAM
from channel.trace import trace_shape
from fedcgd_config.imports import first_line, said
from fedcgd_strategy.constructor_params import keyword_parameters
from fedcgd_strategy.errors import RuleBrokenError
from fedcgd_strategy.flower.aggregators import (
    aggregator_state,
    load_aggregator_state,
    make_aggregator,
)
from fedcgd_strategy.flower.strategy import ScheduledStrategy
from fedcgd_strategy.policies import Policy, policy_call
from fedcgd_strategy.policies.registry import (
    make_policy,
    policy_class,
    replaced_defaults,
    resolved_policy_arguments,
)
from fedcgd_strategy.record import RoundRecord
from fedcgd_task.datasets import DataSplit, load_test_set, load_train_set
from fedcgd_task.models import build_model, count_parameters
from fedcgd_task.partition import all_partitions
from fedcgd_task.training import compute_device, evaluate
from server_app.checkpoint import CHECKPOINT_FILE, Checkpoint, CheckpointRefusedError, run_identity
from server_app.config import RunConfig, channel_class, channel_values


@dataclass
class RunSetup:
    """The objects of one run (``aggregator`` None: FedAvg; ``resolved``: its config.json)."""

    config: RunConfig
    train_set: DataSplit
    test_tensors: tuple[torch.Tensor, torch.Tensor]
    model: nn.Module
    num_params: int
    model_bits: int
    target: NDArray[np.float64]
    device: torch.device
    partition_counts: NDArray[np.int64]
    cell: ChannelModel
    cell_rng: np.random.Generator
    policy: Policy
    policy_rng: np.random.Generator
    resolved: dict[str, Any]
    resume: Checkpoint | None = None
    aggregator: Strategy | None = None

    @property
    def round_offset(self) -> int:
        """Rounds done before this run started (0 for a new run)."""
        return 0 if self.resume is None else self.resume.round

    def strategy(self, on_record: Callable[[RoundRecord], None]) -> ScheduledStrategy:
        """The Flower strategy over this set-up's policy, uplink and generator (build it once)."""
        config = self.config
        return ScheduledStrategy(
            policy=self.policy, cell=self.cell, model_bits=self.model_bits,
            total_bandwidth_hz=config.cell.total_bandwidth_hz, num_devices=config.task.num_devices,
            num_classes=self.train_set.num_classes, rng=self.policy_rng,
            target_dist=self.target if config.target_dist == "global" else None,
            protocol=config.protocol, query_timeout_s=config.query_timeout_s,
            round_offset=self.round_offset, max_update_norm_ratio=config.max_update_norm_ratio,
            partition_counts=self.partition_counts, on_record=on_record,
            aggregator=self.aggregator, seed=config.seed,
        )  # fmt: skip

    def evaluate(self, state: Mapping[str, torch.Tensor]) -> tuple[float, float]:
        """Load ``state`` into :attr:`model` and return its test loss (nats) and accuracy."""
        self.model.load_state_dict(state)
        loss, accuracy = evaluate(self.model.to(self.device), *self.test_tensors)
        return float(loss), float(accuracy)

    def checkpoint(
        self, server_round: int, model: dict[str, torch.Tensor], elapsed_s: float
    ) -> Checkpoint:
        """The run's state after ``server_round`` (:func:`build_setup` restores it exactly)."""
        policy_state = policy_call(
            self.policy, server_round, "its state for the checkpoint",
            lambda: plain_data(self.policy.state_dict(), "state_dict()"),
        )  # fmt: skip
        return Checkpoint(
            round=server_round, model=model, policy_state=policy_state,
            cell_rng_state=dict(self.cell_rng.bit_generator.state),
            policy_rng_state=dict(self.policy_rng.bit_generator.state), elapsed_s=elapsed_s,
            aggregator_state=plain_data(aggregator_state(self.aggregator), "aggregator state"),
            identity=run_identity(self.config),
        )  # fmt: skip


def plain_data(value: Any, where: str) -> Any:
    """``value`` as a checkpoint holds it, arrays copied; else RuleBrokenError naming ``where``."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in "biufc":
        return np.array(value, dtype=value.dtype.newbyteorder("="))  # torch takes native order
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list | tuple):
        items = (plain_data(v, f"{where}[{i}]") for i, v in enumerate(value))
        return list(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, dict) and all(type(k) is str for k in value):
        return {k: plain_data(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise RuleBrokenError(
        f"{where} is {type(value).__name__}: a checkpoint holds numbers, strings, numpy and torch "
        "arrays and lists, tuples and str-keyed dicts of these"
    )


def build_setup(
    config: RunConfig,
    resume: Checkpoint | None = None,
    *,
    on_settings: Callable[[dict[str, Any]], None] | None = None,
) -> RunSetup:
    """Build a run's objects from its config, and from the checkpoint ``resume`` continues.

    ``on_settings`` gets :attr:`RunSetup.resolved` before the policy and the uplink are built.
    """
    cell_seed, policy_seed = np.random.SeedSequence(config.seed).spawn(2)
    train_set = load_train_set(config.task)
    num_classes = train_set.num_classes
    model = build_model(config.task.model, num_classes, train_set.input_shape, seed=config.seed)
    num_params = count_parameters(model)
    model_bits = config.model_bits or num_params * BITS_PER_PARAM  # channel.model-bits = 0
    target = np.bincount(train_set.labels, minlength=num_classes) / len(train_set)
    context = config.policy_context(num_classes)
    policy_arguments = resolved_policy_arguments(config.policy, context, config.policy_params)
    aggregator, aggregator_resolved = make_aggregator(
        config.aggregator, config.aggregator_params, config.task.num_devices
    )
    resolved = config.to_dict() | {
        "num_parameters": num_params,
        "model_bits_used": model_bits,
        "num_classes": num_classes,
        "target_dist_global": target.tolist(),
        "policy_uses_budget": bool(policy_class(config.policy).uses_budget),
        "policy_resolved": policy_arguments,
        "aggregator_resolved": aggregator_resolved,
    }
    if on_settings is not None:
        on_settings(resolved)
        for line in replaced_defaults(config.policy, context):
            log(WARNING, line)  # a new run says it once; a resume has said it

    policy = make_policy(config.policy, context, resolved=policy_arguments)
    cell_rng, policy_rng = np.random.default_rng(cell_seed), np.random.default_rng(policy_seed)
    cell = build_uplink(config, cell_rng, first_round=0 if resume is None else resume.round)
    if resume is not None:
        restore(config, resume, model, policy, aggregator, (cell_rng, policy_rng))
    counts = [
        np.bincount(train_set.labels[p], minlength=num_classes) for p in all_partitions(config.task)
    ]
    return RunSetup(
        config=config, train_set=train_set, test_tensors=load_test_set(config.task).tensors(),
        model=model, num_params=num_params, model_bits=model_bits, target=target,
        device=compute_device(config.task.device), partition_counts=np.stack(counts), cell=cell,
        cell_rng=cell_rng, policy=policy, policy_rng=policy_rng, resolved=resolved,
        resume=resume, aggregator=aggregator,
    )  # fmt: skip


def restore(
    config: RunConfig,
    resume: Checkpoint,
    model: nn.Module,
    policy: Policy,
    aggregator: Strategy | None,
    rngs: tuple[np.random.Generator, np.random.Generator],
) -> None:
    """Restore a checkpoint on fresh objects; CheckpointRefusedError names the part and why."""
    head = f"run-config key 'resume-from' = '{config.resume_from}': {CHECKPOINT_FILE}"
    expected = model.state_dict()
    problem = model_mismatch(expected, resume.model)
    if problem is not None:
        raise CheckpointRefusedError(f"{head} does not fit the run's model: {problem}")
    arrays = {k: v.detach().cpu().numpy() for k, v in expected.items()}
    cell_rng, policy_rng = (rng.bit_generator for rng in rngs)
    part = "its policy state"
    try:  # a user's policy may raise anything: one line
        policy.load_state_dict(resume.policy_state)
        part = "its cell generator state"
        cell_rng.state = resume.cell_rng_state
        part = "its policy generator state"
        policy_rng.state = resume.policy_rng_state
        part = "its aggregator state"
        load_aggregator_state(aggregator, resume.aggregator_state, arrays)
    except Exception as err:
        raise CheckpointRefusedError(
            f"{head}: {part} does not fit the run: {first_line(err)}"
        ) from err
    model.load_state_dict(resume.model)


def model_mismatch(expected: Mapping[str, torch.Tensor], found: Mapping[str, object]) -> str | None:
    """Why ``found`` does not fit the state dict ``expected`` (keys, shape, dtype, finite)."""
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    if missing or unexpected:
        named = (("missing", missing), ("unexpected", unexpected))
        parts = [f"{name} {', '.join(map(repr, keys[:3]))}" for name, keys in named if keys]
        return f"other arrays ({'; '.join(parts)})"
    for key, reference in expected.items():
        value = found[key]
        if not isinstance(value, torch.Tensor):
            return f"{key!r} is {type(value).__name__}, not a tensor"
        if value.shape != reference.shape:
            return f"{key!r} has shape {list(value.shape)}, the model's {list(reference.shape)}"
        if value.dtype != reference.dtype:
            return f"{key!r} has dtype {value.dtype}, the model's {reference.dtype}"
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"{key!r} is not finite (a run's global model always is)"
    return None


def build_uplink(
    config: RunConfig, cell_rng: np.random.Generator, first_round: int
) -> ChannelModel:
    """The uplink ``channel.model`` names (a trace from row ``first_round``); ValueError: 1 line."""
    model = config.channel_model
    if model == "trace":
        key = f"run-config key 'channel.trace' = '{config.channel_trace}'"
        try:  # the arrays' headers first: a trace that cannot cover the run is not read at all
            rounds, devices = trace_shape(config.channel_trace)
            if devices != config.task.num_devices:
                raise ValueError(
                    f"{key}: the trace has V = {devices} devices (columns of available and "
                    f"gain_lin); must equal num-devices = {config.task.num_devices}"
                )
            if rounds < config.num_server_rounds:
                raise ValueError(
                    f"{key}: the trace has R = {rounds} rounds (rows); must be >= "
                    f"num-server-rounds = {config.num_server_rounds}"
                )
            trace = load_trace(config.channel_trace)
        except TraceError as err:
            raise ValueError(f"{key}: {err.reason}") from err
        return TraceReplay(trace, config.cell, first_round=first_round)
    if model in PATHLOSS_MODELS:
        return Cell(config.cell, cell_rng)
    cls = channel_class(model)
    given = channel_values(config.cell, cell_rng)
    arguments = {name: given[name] for name in keyword_parameters(cls) if name in given}
    try:
        return cast(ChannelModel, cls(**arguments))
    except Exception as err:  # your code: one line with where it raised
        raise ValueError(
            f"run-config key 'channel.model' = {model!r}: {cls.__name__}() raised {said(err)}"
        ) from err
