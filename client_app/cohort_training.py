"""Cohort execution's model checks and batched training (docs/design.md, "Cohort execution")."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import MutableMapping, Sequence

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
    update_norm,
)
from client_app.per_sample_norms import CHUNK_BUDGET_FLOATS
from client_app.sigma import mode_kept
from fedcgd_task.imports import first_line

#: Largest change of a device's outputs, relative to their largest magnitude, that
#: :func:`sample_mixing` accepts: far above float64 rounding (~1e-12), about a float32
#: forward pass's relative rounding.
MIXING_TOLERANCE = 1e-6


def sample_mixing(
    model: nn.Module,
    x: torch.Tensor,
    *,
    group_size: int,
    verdicts: MutableMapping[tuple[object, ...], str | None] | None = None,
) -> str | None:
    """Why the samples of one group in ``x`` are not computed apart from the others; None: they are.

    Eval-mode outputs on a copy: in float64, all of ``x`` against each group alone; in the
    model's dtype with autograd, the first group in ``x`` against ``x`` with every group
    replaced by the first. ``verdicts`` keeps the answers by model structure and shapes.
    """
    kept: MutableMapping[tuple[object, ...], str | None] = {} if verdicts is None else verdicts
    key = (  # a model may mix the samples of large batches only: the batch shape counts too
        tuple((name, type(module)) for name, module in model.named_modules()),
        tuple((name, tuple(t.shape), t.dtype) for name, t in model.state_dict().items()),
        tuple(x.shape),
        group_size,
    )
    if key in kept:
        return kept[key]
    try:
        twin = copy.deepcopy(model).eval()
        for p in twin.parameters():
            p.requires_grad_(True)  # as gradient_spreads sets them
        device = next(iter(twin.state_dict().values()), x).device
        x_own = x.to(device)
        first = torch.split(x_own, group_size)[0]
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            own = twin(x_own)[: len(first)].detach()
            own_alone = twin(first.repeat(len(x_own) // len(first), *[1] * (x.dim() - 1)))
            pairs = [(own, own_alone[: len(first)].detach())]
        twin = twin.double()
        x64 = x_own.double()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            pairs.append((twin(x64), torch.cat([twin(g) for g in torch.split(x64, group_size)])))
    except Exception as err:  # any failure of the probe sends the model to the per-device path
        reason = (
            "the check that a device's samples are computed apart from the other devices' "
            f"could not run on a copy of the model ({type(err).__name__}: {first_line(err)})"
        )
        kept[key] = reason
        return reason
    if not all(torch.isfinite(t).all() for pair in pairs for t in pair):
        return None
    for together, apart in pairs:
        change = float((together - apart).abs().max())
        scale = float(apart.abs().max())
        if change > MIXING_TOLERANCE * scale:
            relative = change / scale if scale > 0 else math.inf
            reason = (
                f"its outputs for one device's samples change by {relative:.1e} of their "
                "scale when other devices' samples share the batch (the model mixes the "
                "samples of a batch)"
            )
            kept[key] = reason
            return reason
    kept[key] = None
    return None


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
    model: nn.Module,
    devices: Sequence[DeviceRound],
    *,
    stats: Sequence[PreTrainingStats],
) -> list[TrainedDevice]:
    """Tau plain SGD steps of every device from ``model`` (left unchanged), batched with vmap.

    Per device the arithmetic of :func:`fedcgd_task.training.train_local`; ``devices`` share
    tau, b and eta; ``stats`` are their statistics at ``model``.
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
                out.append(
                    TrainedDevice(
                        stats=stats[start + v],
                        weights=weights,
                        mean_loss=float(np.mean([step_losses[v] for step_losses in losses])),
                        update_norm=update_norm(before, weights),
                        train_time_s=float(share_s),
                    )
                )
    return out
