"""Squared gradient norms of a ``nn.Linear`` layer: per sample and per group of samples.

y_t = W a_t + c at T positions: dl_i/dW = sum_t g_t a_t^T (norm:
:func:`~client_app.layer_norms.weight_matrix.weight_sq_norms`), dl_i/dc = sum_t g_t. A group's
summed gradient is that of one Linear applied at the T positions of all its samples.
"""

from __future__ import annotations

import torch
from torch import nn

from client_app.layer_norms.weight_matrix import groups_of, row_sq_sums, weight_sq_norms


def linear_sq_norms(
    module: nn.Linear, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Linear layer, float64 [b].

    ``a`` [b, *, K] is its input, ``g`` [b, *, O] the gradient of the per-sample losses with respect
    to its output; ``chunk_size`` samples per chunk (memory only).
    """
    b = int(a.shape[0])
    u = a.reshape(b, -1, module.in_features).transpose(1, 2)
    gm = g.reshape(b, -1, module.out_features).transpose(1, 2)
    total = weight_sq_norms(u, gm, chunk_size=chunk_size)
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2))
    return total


def linear_group_sq_norms(
    module: nn.Linear,
    a: torch.Tensor,
    g: torch.Tensor,
    group_size: int,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Linear layer, float64 [N].

    :func:`linear_sq_norms` on ``a`` and ``g`` viewed as [N, group_size T, K] and
    [N, group_size T, O]; ``chunk_size`` counts groups.
    """
    n = groups_of(int(a.shape[0]), group_size)
    a_groups = a.reshape(n, -1, module.in_features)
    g_groups = g.reshape(n, -1, module.out_features)
    return linear_sq_norms(module, a_groups, g_groups, chunk_size=chunk_size)
