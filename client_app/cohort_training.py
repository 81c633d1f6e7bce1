"""Cohort execution's training: the tau SGD steps of several devices at once, with ``vmap``.

Every device starts from the same global model and steps on its own batches; the devices'
parameters are stacked and :func:`torch.func.vmap` computes each device's gradient from its
own batch alone (:mod:`client_app.cohort` decides when this path runs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from client_app.device_round import (
    DeviceRound,
    PreTrainingStats,
    TrainedDevice,
    floating_state,
    update_norm_between,
)
from client_app.per_sample_norms import CHUNK_BUDGET_FLOATS

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


def train_chunk_devices(model: nn.Module) -> int:
    """Devices trained together: parameters and gradients within a quarter of the budget."""
    num_params = sum(p.numel() for p in model.parameters())
    by_memory = CHUNK_BUDGET_FLOATS // (4 * 2 * max(num_params, 1))
    return max(1, min(TRAIN_CHUNK_MAX_DEVICES, by_memory))


def cohort_train(
    model: nn.Module,
    devices: Sequence[DeviceRound],
    *,
    stats: Sequence[PreTrainingStats],
) -> list[TrainedDevice]:
    """Tau plain SGD steps of every device from ``model``, batched over devices with vmap.

    Per device the arithmetic of :func:`fedcgd_task.training.train_local` (paper eq.
    (localupdate)) on its own batches, each step ``torch.add(w, g, alpha=-eta)`` as in
    :func:`fedcgd_task.training.sgd_step`. ``model`` (no dropout, no batch normalisation:
    :func:`training_blockers`) is left unchanged; ``devices`` share tau, b and eta; ``stats`` are
    their statistics at ``model``. Returns per device its :class:`TrainedDevice` (train time: its
    share of the chunk's).
    """
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
    per_chunk = train_chunk_devices(model)
    out: list[TrainedDevice] = []
    flags = [(m, m.training) for m in model.modules()]
    model.train()
    try:
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
                out.append(
                    TrainedDevice(
                        stats=stats[start + v],
                        weights=weights,
                        mean_loss=float(np.mean([step_losses[v] for step_losses in losses])),
                        update_norm=update_norm_between(before, weights),
                        train_time_s=float(share_s),
                    )
                )
    finally:
        for module, flag in flags:
            module.training = flag
    return out
