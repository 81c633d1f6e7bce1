"""Random layers and inputs, and the autograd oracles of the per-sample norm and σ̂ tests."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn


def group_reference(layer: nn.Module, a: torch.Tensor, g: torch.Tensor, size: int) -> torch.Tensor:
    """||sum_{i in group} dl_i/dθ||^2 per group by one autograd backward per group.

    ``a`` is the layer's input and ``g`` the gradient of the loss at its output, for a batch
    split into consecutive groups of ``size`` samples (``size = 1``: per-sample norms).
    """
    out = []
    params = list(layer.parameters())
    for start in range(0, a.shape[0], size):
        rows = slice(start, start + size)
        grads = torch.autograd.grad(layer(a[rows]), params, g[rows])
        out.append(sum(float(gr.double().square().sum()) for gr in grads))
    return torch.tensor(out, dtype=torch.float64)


def per_sample_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One backward per sample (eval mode): float64 [b, num_params] per-sample gradients."""
    was_training = model.training
    model.eval()
    grads = []
    for i in range(x.shape[0]):
        params = list(model.parameters())
        loss = nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        per_param = torch.autograd.grad(loss, params, allow_unused=True)
        grads.append(
            torch.cat(
                [
                    (torch.zeros_like(p) if g is None else g).reshape(-1).double()
                    for p, g in zip(params, per_param, strict=True)
                ]
            )
        )
    model.train(was_training)
    return torch.stack(grads)


class Reference(NamedTuple):
    """The slow reference's sigma-hat and mean loss, and the tolerance for comparing with it."""

    sigma: float
    loss: float
    rel_tol: float


def reference_sigma(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Reference:
    """Slow reference: float64 deviations of the loop's per-sample gradients from their mean."""
    stacked = per_sample_grads(model, x, y)
    var = float(((stacked - stacked.mean(dim=0)) ** 2).sum(dim=1).mean())
    with torch.no_grad():
        was_training = model.training
        model.eval()
        loss = float(nn.functional.cross_entropy(model(x), y).double())
        model.train(was_training)
    mean_sq = float(stacked.square().sum(dim=1).mean())
    return Reference(math.sqrt(var), loss, sigma_rel_tol(mean_sq, var))


#: Relative tolerance of a float64 result computed two ways without cancellation: below 1e4
#: roundings of relative size eps = 1.1e-16 each, times 10.
REL64 = 1.1e-11


def sigma_rel_tol(mean_sq_norm: float, sigma_sq: float) -> float:
    """Relative tolerance between two float64 computations of sigma-hat of a batch.

    ``mean_sq_norm``: (1/b) sum_i ||g_i||^2 of the per-sample gradients; ``sigma_sq``: σ̂². Each
    entry carries a relative error below 1e4 eps (depth <= 20 times log2 of sums of <= 1e6
    terms, with margin). The one-pass method subtracts ||g_bar||^2 from (1/b) sum_i ||g_i||^2,
    so σ̂'s relative error grows by (1/b) sum_i ||g_i||^2 / σ̂²: REL64 (1 + ratio).
    """
    return REL64 * (1 + mean_sq_norm / sigma_sq)


class Mixes(nn.Module):
    """An MLP whose hidden layer mixes the samples of a batch when ``mixes(h)``: ``how`` "centre"
    subtracts its batch mean, "roll" adds 1e-3 of the next sample's (no parameters: still two
    Linear layers for the one-pass σ̂). A check on a few samples, without gradients or on a
    float64 copy may pass where a cohort's batch mixes."""

    def __init__(
        self, features: int, num_classes: int, mixes: Callable[[torch.Tensor], bool], how: str
    ) -> None:
        super().__init__()
        self.hidden = nn.Linear(features, 16)
        self.out = nn.Linear(16, num_classes)
        self.mixes, self.how = mixes, how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.hidden(x.flatten(1)))
        if self.mixes(h):
            h = h - h.mean(dim=0) if self.how == "centre" else h + 1e-3 * h.roll(1, dims=0)
        return self.out(h)


def centred_above_8(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Centring batches of more than 8 samples, in float64."""
    return Float64(Mixes(math.prod(input_shape), num_classes, lambda h: h.shape[0] > 8, "centre"))


def rolled_above_16(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Rolling batches of more than 16 samples, in float64."""
    return Float64(Mixes(math.prod(input_shape), num_classes, lambda h: h.shape[0] > 16, "roll"))


def centred_under_autograd(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Centring under autograd only, in float64."""
    mixes = lambda h: torch.is_grad_enabled()  # noqa: E731
    return Float64(Mixes(math.prod(input_shape), num_classes, mixes, "centre"))


def centred_in_float32(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Centring in float32 only (a float32 model)."""
    return Mixes(math.prod(input_shape), num_classes, lambda h: h.dtype == torch.float32, "centre")


class Float64(nn.Module):
    """A model computed in float64: its inputs are cast, its parameters are float64."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.double())


def mlp_float64(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The built-in ``mlp`` in float64 (run config ``model = "layer_cases:mlp_float64"``)."""
    from fedcgd_task.models import build_model

    return Float64(build_model("mlp", num_classes, input_shape))


def cnn1d_float64(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The built-in ``cnn1d`` in float64 (run config ``model = "layer_cases:cnn1d_float64"``)."""
    from fedcgd_task.models import build_model

    return Float64(build_model("cnn1d", num_classes, input_shape))


def batch_centred_mlp(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """Centring every batch, in float64 (run config ``model = "layer_cases:batch_centred_mlp"``)."""
    return Float64(Mixes(math.prod(input_shape), num_classes, lambda h: True, "centre"))
