"""sigma-hat_v: the spread of per-sample gradients on a device's first mini-batch.

Paper eq. (local_est_sigma): sqrt((1/b) sum_i ||g_i - g_bar||^2), g_i sample i's cross-entropy
gradient at the received model in eval mode. :func:`gradient_spread` uses the expanded square
from one backward pass (resolved to ~ sqrt(float32 eps) ~ 3e-4 of the rms per-sample gradient
norm, clamped at 0); :func:`gradient_spread_vmap` serves models outside its scope.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F  # noqa: N812 (torch convention)

from client_app.per_sample_norms import (
    CHUNK_BUDGET_FLOATS,
    UnsupportedModelError,
    per_sample_grad_norms,
)


def gradient_spread(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, chunk_size: int | None = None
) -> float:
    """sigma-hat_v of a device's first mini-batch ``x`` [b, ...], ``y`` [b]
    (models outside the one-pass scope: :func:`gradient_spread_vmap`); ``model`` unchanged,
    ``chunk_size`` changes the memory only."""  # noqa: D205, D209
    try:  # a model outside the scope is refused before the pass
        return gradient_spreads(model, x, y, group_size=int(y.shape[0]), chunk_size=chunk_size)[0]
    except UnsupportedModelError:
        return gradient_spread_vmap(model, x, y, chunk_size=chunk_size)


def gradient_spreads(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    group_size: int,
    chunk_size: int | None = None,
) -> list[float]:
    """sigma-hat_v of N devices' stacked first mini-batches ``x`` [N b, ...] by one pass: each
    equals its batch's alone up to summation order if the model computes samples apart
    (:func:`client_app.cohort.sample_mixing`)."""  # noqa: D205, D209
    with mode_kept(model):
        norms = per_sample_grad_norms(model, x, y, group_size=group_size, chunk_size=chunk_size)
    b = group_size
    sample_sq = norms.sq_norms.reshape(-1, b).sum(dim=1).tolist()
    group_sq = norms.group_sq_norms.tolist()
    return [spread_from_norms(sq, g_sq, b) for sq, g_sq in zip(sample_sq, group_sq, strict=True)]


def spread_from_norms(sum_sq_norms: float, sum_grad_sq_norm: float, b: int) -> float:
    """sigma-hat_v = sqrt(max((1/b) sum_i ||g_i||^2 - ||sum_i g_i||^2 / b^2, 0))."""
    return math.sqrt(max(sum_sq_norms / b - sum_grad_sq_norm / (b * b), 0.0))


@contextmanager
def mode_kept(model: nn.Module, training: bool = False) -> Iterator[None]:
    """Put every submodule of ``model`` in eval (or ``training``) mode; restore each one's own."""
    flags = [(module, module.training) for module in model.modules()]
    model.train(training)
    try:
        yield
    finally:
        for module, flag in flags:
            module.training = flag


def gradient_spread_vmap(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, chunk_size: int | None = None
) -> float:
    """sigma-hat_v from vmap per-sample gradients for any model: deviations formed in chunks
    combined in float64 (Chan et al.'s pairwise update), 6-80x an SGD step's cost."""  # noqa: D205, D209
    b = int(y.shape[0])
    params = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: t.detach() for name, t in model.named_buffers()}
    num_params = sum(p.numel() for p in params.values())
    if chunk_size is None:
        chunk_size = max(1, CHUNK_BUDGET_FLOATS // max(num_params, 1))
    device = next(iter(params.values())).device

    def sample_loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return F.cross_entropy(logits, yi.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))

    with mode_kept(model):
        count = 0
        mean: dict[str, torch.Tensor] = {}
        m2 = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, b, chunk_size):
            xc = x[start : start + chunk_size].to(device)
            yc = y[start : start + chunk_size].to(device)
            grads = per_sample(params, xc, yc)
            n_chunk = int(yc.shape[0])
            chunk_mean = {k: g.double().mean(dim=0) for k, g in grads.items()}
            chunk_m2 = sum(((g.double() - chunk_mean[k]) ** 2).sum() for k, g in grads.items())
            if count == 0:
                mean, m2 = chunk_mean, torch.as_tensor(chunk_m2, dtype=torch.float64)
            else:
                total = count + n_chunk
                shift_sq = sum(((chunk_mean[k] - mean[k]) ** 2).sum() for k in mean)
                m2 = m2 + chunk_m2 + shift_sq * (count * n_chunk / total)
                mean = {k: mean[k] + (chunk_mean[k] - mean[k]) * (n_chunk / total) for k in mean}
            count += n_chunk
    return float(torch.sqrt(torch.clamp(m2, min=0.0) / b))
