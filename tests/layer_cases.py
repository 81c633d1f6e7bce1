"""Layers with random inputs, and the autograd oracle the per-sample norm tests check against."""

from __future__ import annotations

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


def random_group_norm(
    seed: int, groups: int, channels: int, shape: tuple[int, int, int], scale: float, shift: float
) -> tuple[nn.GroupNorm, torch.Tensor, torch.Tensor]:
    """A GroupNorm with random affine parameters, its input ``a`` and output gradient ``g``.

    Drawn after ``torch.manual_seed(seed)``; ``shape`` is (batch, height, width), ``a`` is
    standard normal times ``scale`` plus ``shift`` (off the origin, as activations are).
    """
    torch.manual_seed(seed)
    norm = nn.GroupNorm(groups, channels)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    batch, height, width = shape
    a = torch.randn(batch, channels, height, width) * scale + shift
    g = torch.randn(batch, channels, height, width)
    return norm, a, g
