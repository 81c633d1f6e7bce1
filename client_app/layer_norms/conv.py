"""Squared gradient norms of ``nn.Conv2d`` and ``nn.Conv1d`` layers: per sample and per group.

The formulas are in :mod:`client_app.layer_norms`; a Conv1d runs as a Conv2d of height 1
(:class:`ConvGeometry`), with the same weights and per-sample gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)
from torch.nn.grad import conv2d_weight

from client_app.layer_norms.weight_matrix import (
    chunk_length,
    gram_is_cheaper,
    gram_sq_norms,
    groups_of,
    row_sq_sums,
)

#: The convolution layers these formulas take.
Conv: TypeAlias = nn.Conv1d | nn.Conv2d


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution as a 2-D one: weight [O, C_in / groups, *kernel_size], zero padding.

    ``kernel_size``, ``stride``, ``padding``, ``dilation`` are (height, width); a Conv1d's height
    entries are 1, 1, 0 and 1.
    """

    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    has_bias: bool

    def inputs_per_output(self, in_channels: int) -> int:
        """K = C_in / groups k_h k_w: the inputs one output of the layer reads at a position."""
        return (in_channels // self.groups) * self.kernel_size[0] * self.kernel_size[1]

    @classmethod
    def of(cls, module: Conv) -> ConvGeometry:
        """The geometry of ``module``; a Conv1d as a Conv2d of height 1."""
        padding: tuple[int, ...] = module.padding  # type: ignore[assignment]  # checked in scope
        if isinstance(module, nn.Conv1d):
            return cls(
                kernel_size=(1, module.kernel_size[0]),
                stride=(1, module.stride[0]),
                padding=(0, padding[0]),
                dilation=(1, module.dilation[0]),
                groups=module.groups,
                has_bias=module.bias is not None,
            )
        return cls(
            kernel_size=(module.kernel_size[0], module.kernel_size[1]),
            stride=(module.stride[0], module.stride[1]),
            padding=(padding[0], padding[1]),
            dilation=(module.dilation[0], module.dilation[1]),
            groups=module.groups,
            has_bias=module.bias is not None,
        )


def stacked_weight_gradients(
    geometry: ConvGeometry, x: torch.Tensor, grad: torch.Tensor, copies: int
) -> torch.Tensor:
    """Weight gradients of ``copies`` copies of the layer, side by side in the channels.

    One :func:`torch.nn.grad.conv2d_weight` with ``copies`` times the layer's groups: copy j reads
    input channels ``j C_in ..`` of ``x`` [n, copies C_in, H, W] and output channels ``j O ..`` of
    ``grad`` [n, copies O, H_out, W_out], summed over n. Returns
    [copies O, C_in / groups, *kernel_size], copy j in rows ``j O .. (j + 1) O - 1``.
    """
    c_in = int(x.shape[1]) // copies
    return conv2d_weight(
        x,
        (int(grad.shape[1]), c_in // geometry.groups, *geometry.kernel_size),
        grad,
        stride=geometry.stride,
        padding=geometry.padding,
        dilation=geometry.dilation,
        groups=copies * geometry.groups,
    )


def conv_operands(
    module: Conv, a: torch.Tensor, g: torch.Tensor
) -> tuple[ConvGeometry, torch.Tensor, torch.Tensor]:
    """The layer's geometry, its input ``a`` and output gradient ``g`` as a 2-D convolution's.

    A Conv1d's [b, C, L] become [b, C, 1, L]; a Conv2d's are returned as they are.
    """
    if isinstance(module, nn.Conv1d):
        a, g = a.unsqueeze(2), g.unsqueeze(2)
    return ConvGeometry.of(module), a, g


def conv_sq_norms(
    module: Conv, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Conv2d or Conv1d layer, float64 [b].

    The Gram route (groups = 1, when T (K + O) < K O) or the per-sample weight gradients [b, O, K]
    from one weight-gradient convolution with one group per sample.

    Parameters
    ----------
    module : torch.nn.Conv2d or torch.nn.Conv1d
        The layer (C_in -> O channels, zero padding).
    a : torch.Tensor, shape [b, C_in, H, W] or [b, C_in, L]
        Its input.
    g : torch.Tensor, shape [b, O, H_out, W_out] or [b, O, L_out]
        Gradient of the per-sample losses with respect to its output.
    chunk_size : int, optional
        Samples per chunk (memory only).
    """
    geometry, a, g = conv_operands(module, a, g)
    (b, c_in, h, w), (o, h_out, w_out) = a.shape, g.shape[1:]
    t, k = h_out * w_out, geometry.inputs_per_output(c_in)
    use_gram = geometry.groups == 1 and gram_is_cheaper(t, k, o)
    chunk = chunk_length(k * t + 2 * t * t if use_gram else o * k, chunk_size)
    parts = []
    for start in range(0, b, chunk):
        ac, gc = a[start : start + chunk], g[start : start + chunk]
        n = int(ac.shape[0])
        if use_gram:
            u = F.unfold(
                ac,
                kernel_size=geometry.kernel_size,
                dilation=geometry.dilation,
                padding=geometry.padding,
                stride=geometry.stride,
            )
            parts.append(gram_sq_norms(u, gc.reshape(n, o, t)))
        else:
            x, grad = ac.reshape(1, n * c_in, h, w), gc.reshape(1, n * o, h_out, w_out)
            gw = stacked_weight_gradients(geometry, x, grad, n)
            parts.append(row_sq_sums(gw.reshape(n, -1)))
    total = torch.cat(parts)
    if geometry.has_bias:
        total = total + row_sq_sums(g.sum(dim=(2, 3)))
    return total


def conv_group_sq_norms(
    module: Conv,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Conv2d or Conv1d layer, float64 [N].

    A chunk's groups are one weight-gradient convolution in which each group is a group of
    channels and its samples are the batch. ``a`` and ``g`` are as in :func:`conv_sq_norms` with
    N ``group_size`` consecutive samples; ``chunk_size`` counts groups (memory only).
    """
    geometry, a, g = conv_operands(module, a, g)
    (b, c_in, h, w), (o, h_out, w_out) = a.shape, g.shape[1:]
    n, k = groups_of(b, group_size), geometry.inputs_per_output(c_in)
    per_group = o * k + group_size * (c_in * h * w + o * h_out * w_out)
    chunk = chunk_length(per_group, chunk_size)
    parts = []
    for start in range(0, n, chunk):
        rows = slice(start * group_size, (start + chunk) * group_size)
        m = min(chunk, n - start)
        # [m, s, C, H, W] -> [s, m C, H, W]: the samples are the batch, the groups channels.
        ac = a[rows].reshape(m, group_size, c_in, h, w).transpose(0, 1)
        gc = g[rows].reshape(m, group_size, o, h_out, w_out).transpose(0, 1)
        x = ac.reshape(group_size, m * c_in, h, w)
        gw = stacked_weight_gradients(geometry, x, gc.reshape(group_size, m * o, h_out, w_out), m)
        parts.append(row_sq_sums(gw.reshape(m, -1)))
    total = torch.cat(parts)
    if geometry.has_bias:
        total = total + row_sq_sums(g.sum(dim=(2, 3)).reshape(n, group_size, o).sum(dim=1))
    return total
