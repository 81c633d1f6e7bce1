"""Squared gradient norms of a ``nn.Linear`` layer: per sample and per group of samples.

y_t = W a_t + c at T positions (input [b, *, K] flattened): dl_i/dW = sum_t g_t a_t^T, whose
squared norm :func:`~client_app.layer_norms.weight_matrix.weight_sq_norms` takes, and
dl_i/dc = sum_t g_t. A group's summed gradient is that of one Linear applied at the T positions
of all its samples.
"""

from __future__ import annotations

import torch
from torch import nn

from client_app.layer_norms.weight_matrix import groups_of, row_sq_sums, weight_sq_norms


def linear_sq_norms(
    module: nn.Linear, a: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample ||dl_i/dW||^2 + ||dl_i/dc||^2 of a Linear layer.

    Parameters
    ----------
    module : torch.nn.Linear
        The layer (K = in_features, O = out_features).
    a : torch.Tensor, shape [b, *, K]
        Its input.
    g : torch.Tensor, shape [b, *, O]
        Gradient of the per-sample losses with respect to its output.
    chunk_size : int, optional
        Samples per chunk (memory only).

    Returns
    -------
    torch.Tensor of float64, shape [b]

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
    """Per-group ||sum_i dl_i/dW||^2 + ||sum_i dl_i/dc||^2 of a Linear layer.

    The summed gradient of a group is that of one Linear applied at the T positions of all its
    samples, so this is :func:`linear_sq_norms` on the input viewed as [N, group_size T, K].

    Parameters
    ----------
    module : torch.nn.Linear
        The layer (K = in_features, O = out_features).
    a : torch.Tensor, shape [N group_size, *, K]
        Its input, groups of ``group_size`` consecutive samples (seen as [N, group_size T, K]).
    g : torch.Tensor, shape [N group_size, *, O]
        Gradient of the per-sample losses with respect to its output (seen as
        [N, group_size T, O]).
    group_size : int
        Samples per group.
    chunk_size : int, optional
        Groups per chunk (memory only): each group is one sample of :func:`linear_sq_norms`.

    Returns
    -------
    torch.Tensor of float64, shape [N]

    """
    n = groups_of(int(a.shape[0]), group_size)
    a_groups = a.reshape(n, -1, module.in_features)
    g_groups = g.reshape(n, -1, module.out_features)
    return linear_sq_norms(module, a_groups, g_groups, chunk_size=chunk_size)
