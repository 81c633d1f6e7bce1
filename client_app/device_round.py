"""A device's round: what a message asks, the per-device computation, cohorts' batched training."""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, UserConfig
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from client_app.per_sample_norms import CHUNK_BUDGET_FLOATS
from client_app.sigma import gradient_spread, mode_kept
from fedcgd_config import keys
from fedcgd_config.settings import TaskSettings, TrainingSettings, read_round_config
from fedcgd_task.model_record import layout, model_arrays, model_record
from fedcgd_task.models import build_model
from fedcgd_task.partition import LocalSplit, local_split
from fedcgd_task.training import (
    compute_device,
    dropout_seed,
    local_batches,
    seeded_generators,
    train_local,
)


@dataclass(frozen=True)
class PreTrainingStats:
    """Class counts of the round's tau batches, σ̂_v (eq. local_est_sigma) when asked."""

    label_hist: list[int]
    sigma: float | None


def node_split(context: Context) -> tuple[TaskSettings, LocalSplit]:
    """The run's settings and the node's local data; ValueError unless ``node_config`` fits."""
    settings = run_settings(context.run_config)
    pid, num = (
        context.node_config.get(k) for k in (keys.NODE_PARTITION_ID, keys.NODE_NUM_PARTITIONS)
    )
    if not (
        type(pid) is int and type(num) is int and num == settings.num_devices and 0 <= pid < num
    ):
        raise ValueError(
            f"node_config {keys.NODE_PARTITION_ID} = {pid!r}, {keys.NODE_NUM_PARTITIONS} = "
            f"{num!r}; allowed: ints, {keys.NODE_NUM_PARTITIONS} = run-config "
            f"num-devices = {settings.num_devices}, {keys.NODE_PARTITION_ID} in 0 .. "
            f"{settings.num_devices - 1} (start the SuperNode with --node-config "
            f'"{keys.NODE_PARTITION_ID}=<v> {keys.NODE_NUM_PARTITIONS}=<V>")'
        )
    return settings, local_split(settings, pid)


def received_model(msg: Message, settings: TaskSettings, split: LocalSplit) -> nn.Module:
    """Load the message's model record into this process's model of the run config's kind."""
    model = process_model(
        settings.model, split.num_classes, split.source.input_shape, settings.device
    )
    state = record_state(cast(ArrayRecord, msg.content[keys.ARRAYS]), model.state_dict())
    model.load_state_dict(state, strict=True)  # copies into the existing tensors, in place
    model.zero_grad(set_to_none=True)
    return model


def state_record(state: Mapping[str, torch.Tensor]) -> ArrayRecord:
    """A torch state dict as a message carries it (:mod:`fedcgd_task.model_record`)."""
    return model_record({k: t.detach().cpu().numpy() for k, t in state.items()})


def record_state(record: ArrayRecord, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of ``like``'s names and shapes cut from ``record`` (CPU, sharing its memory;
    ValueError in one line where it does not fit)."""  # noqa: D205, D209
    return {k: torch.from_numpy(v) for k, v in model_arrays(record, layout(like)).items()}


@functools.lru_cache(maxsize=2)
def process_model(
    name: str, num_classes: int, input_shape: tuple[int, ...], device: str = "auto"
) -> nn.Module:
    """One model per process and architecture, reused (ResNet-18-GN: build 160 ms, load 7 ms)."""
    return build_model(name, num_classes, input_shape).to(compute_device(device))


def same_config(a: UserConfig, b: UserConfig) -> bool:
    """Whether two flat run configs hold the same keys with values equal in type and value."""
    return a is b or (a == b and all(type(v) is type(b[k]) for k, v in a.items()))


#: The last run config read (a copy, the object), the working folder, and its settings.
_LAST_SETTINGS: list[tuple[UserConfig, UserConfig, str, TaskSettings]] = []


def run_settings(run_config: UserConfig) -> TaskSettings:
    """:meth:`TaskSettings.from_run_config`, read once for the equal configs of a run's nodes."""
    cwd = os.getcwd()
    for kept, seen, kept_cwd, settings in _LAST_SETTINGS:
        if kept_cwd == cwd and (run_config is seen or same_config(kept, run_config)):
            return settings
    settings = TaskSettings.from_run_config(run_config)
    _LAST_SETTINGS[:] = [(dict(run_config), run_config, cwd, settings)]
    return settings


@dataclass(frozen=True)
class DeviceRound:
    """What a stats or train message asks of a device; ``batches``: positions in ``split``."""

    settings: TaskSettings
    partition_id: int
    split: LocalSplit
    server_round: int
    training: TrainingSettings
    want_sigma: bool
    batches: list[np.ndarray]


def device_round(msg: Message, context: Context) -> DeviceRound:
    """Read the run config, the node's partition, the round config; draw the round's batches."""
    settings, split = node_split(context)
    v = split.partition_id
    server_round, training, want_sigma = read_round_config(msg.content[keys.CONFIG])
    batches = local_batches(settings.seed, training, len(split), server_round, v)
    return DeviceRound(settings, v, split, server_round, training, want_sigma, batches)


def seeded_for(rnd: DeviceRound) -> AbstractContextManager[None]:
    """The global generators seeded for the device's round (:func:`seeded_generators`)."""
    seed = dropout_seed(rnd.settings.seed, rnd.server_round, rnd.partition_id)
    return seeded_generators(seed, compute_device(rnd.settings.device))


def label_hist(split: LocalSplit, batches: list[np.ndarray]) -> list[int]:
    """Class counts of all samples of the round's batches (length C, sums to tau b)."""
    used = np.concatenate(batches)
    return [int(c) for c in np.bincount(split.labels[used], minlength=split.num_classes)]


def pre_training_stats(
    model: nn.Module, split: LocalSplit, batches: list[np.ndarray], *, want_sigma: bool = True
) -> PreTrainingStats:
    """Compute the label histogram of the round's batches and (if asked) sigma-hat on the first."""
    sigma = None
    if want_sigma:
        x_first, y_first = split.tensors(batches[0])
        sigma = gradient_spread(model, x_first, y_first)
    return PreTrainingStats(label_hist=label_hist(split, batches), sigma=sigma)


def device_stats(msg: Message, rnd: DeviceRound) -> PreTrainingStats:
    """The per-device path of a ``query.stats``: the statistics at the received model."""
    model = received_model(msg, rnd.settings, rnd.split)
    return pre_training_stats(model, rnd.split, rnd.batches, want_sigma=rnd.want_sigma)


def floating_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The floating-point entries of the model's state dict, copied (what an update changes)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}


def update_norm(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """||w_new - w_received||_2 over the floating entries of ``before`` (float64 sums)."""
    total = 0.0
    for name, value in before.items():
        diff = after[name].detach().double() - value.double()
        total += float((diff * diff).sum())
    return math.sqrt(total)


@dataclass(frozen=True)
class TrainedDevice:
    """A device's train reply: weights (CPU), mean step loss, update norm, training seconds."""

    stats: PreTrainingStats
    weights: dict[str, torch.Tensor]
    mean_loss: float
    update_norm: float
    train_time_s: float


def train_device(msg: Message, rnd: DeviceRound) -> TrainedDevice:
    """The per-device path: the received model's statistics, then tau SGD steps."""
    model = received_model(msg, rnd.settings, rnd.split)
    stats = pre_training_stats(model, rnd.split, rnd.batches, want_sigma=rnd.want_sigma)
    before = floating_state(model)
    x, y = rnd.split.tensors(np.concatenate(rnd.batches))
    # Batches index the gathered rows 0 .. tau b - 1 in order.
    positions = [np.arange(t * len(b), (t + 1) * len(b)) for t, b in enumerate(rnd.batches)]
    seed = dropout_seed(rnd.settings.seed, rnd.server_round, rnd.partition_id)
    started = time.perf_counter()
    losses = train_local(model, x, y, positions, rnd.training.learning_rate, torch_seed=seed)
    train_time_s = time.perf_counter() - started
    weights = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    norm = update_norm(before, model.state_dict())
    return TrainedDevice(stats, weights, float(np.mean(losses)), norm, float(train_time_s))


#: Most devices trained together.
TRAIN_CHUNK_MAX_DEVICES = 64


def training_blockers(model: nn.Module) -> list[str]:
    """Why the devices' training cannot be batched with ``vmap`` (empty: it can)."""
    reasons = []
    if any(isinstance(m, _DropoutNd) and m.p > 0 for m in model.modules()):
        reasons.append("dropout masks come from each device's own seeded stream")
    if any(isinstance(m, _BatchNorm) for m in model.modules()):
        reasons.append("batch normalisation updates running statistics in training mode")
    return reasons


def cohort_train(
    model: nn.Module, devices: Sequence[DeviceRound], *, stats: Sequence[PreTrainingStats]
) -> list[TrainedDevice]:
    """Tau SGD steps of every device (sharing tau, b, eta) from ``model`` (unchanged), by vmap:
    per device the arithmetic of :func:`~fedcgd_task.training.train_local`."""  # noqa: D205, D209
    before = floating_state(model)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    buffers = {name: t.detach() for name, t in model.named_buffers()}
    lr = devices[0].training.learning_rate
    b = len(devices[0].batches[0])
    steps = len(devices[0].batches)
    device = next(model.parameters()).device

    def batch_loss(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, (params, buffers), (x,)), y)

    # The devices' losses from one batched forward; one backward of their sum then gives each
    # device its own gradient (they share nothing). torch.func.grad would give the same
    # gradients (tested) but imports torch's compiler on first use (1.4 s).
    device_losses = vmap(batch_loss, randomness="error")
    # Devices trained together: parameters and gradients within a quarter of the budget.
    by_memory = CHUNK_BUDGET_FLOATS // (8 * max(sum(p.numel() for p in model.parameters()), 1))
    per_chunk = max(1, min(TRAIN_CHUNK_MAX_DEVICES, by_memory))
    out: list[TrainedDevice] = []
    with mode_kept(model, training=True):
        for start in range(0, len(devices), per_chunk):
            chunk = devices[start : start + per_chunk]
            started = time.perf_counter()
            data = [d.split.tensors(np.concatenate(d.batches)) for d in chunk]
            x_all = torch.stack([x for x, _ in data]).to(device)
            y_all = torch.stack([y for _, y in data]).to(device)
            params = {
                name: p.detach().unsqueeze(0).repeat(len(chunk), *([1] * p.dim()))
                for name, p in model.named_parameters()
            }
            losses = []
            for t in range(steps):
                rows = slice(t * b, (t + 1) * b)
                for p in params.values():
                    p.requires_grad_(True)
                with torch.enable_grad():
                    loss = device_losses(params, x_all[:, rows], y_all[:, rows])
                    grads = torch.autograd.grad(loss.sum(), list(params.values()))
                with torch.no_grad():
                    params = {
                        n: torch.add(p, g, alpha=-lr)
                        for (n, p), g in zip(params.items(), grads, strict=True)
                    }
                losses.append(loss.detach().tolist())
            share_s = (time.perf_counter() - started) / len(chunk)
            for v in range(len(chunk)):
                weights = {
                    name: (params[name][v] if name in params else value).cpu()
                    for name, value in state.items()
                }
                mean_loss = float(np.mean([step_losses[v] for step_losses in losses]))
                norm = update_norm(before, weights)
                out.append(TrainedDevice(stats[start + v], weights, mean_loss, norm, share_s))
    return out
