"""Squared gradient norms of a ``nn.GroupNorm`` layer: per sample and per group of samples.

y = gamma * a_hat + beta per channel, with a_hat the normalised input, so dl_i/dgamma_c =
sum_s g_cs a_hat_cs and dl_i/dbeta_c = sum_s g_cs over spatial positions s.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch convention)

from client_app.layer_norms.weight_matrix import groups_of, row_sq_sums


def group_norm_sq_norms(module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample ||dl_i/dgamma||^2 + ||dl_i/dbeta||^2 of an affine GroupNorm, float64 [b].

    ``a`` [b, C, *] is its input (a_hat is recomputed from it), ``g`` [b, C, *] the gradient of the
    per-sample losses with respect to its output.
    """
    b, c = int(a.shape[0]), module.num_channels
    a_hat = F.group_norm(a, module.num_groups, eps=module.eps).reshape(b, c, -1)
    gm = g.reshape(b, c, -1)
    total = torch.zeros(b, dtype=torch.float64, device=a.device)
    if module.weight is not None:
        total = total + row_sq_sums((a_hat * gm).sum(dim=2))
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2))
    return total


def group_norm_group_sq_norms(
    module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor, group_size: int
) -> torch.Tensor:
    """Per-group ||sum_i dl_i/dgamma||^2 + ||sum_i dl_i/dbeta||^2 of a GroupNorm, float64 [N].

    ``a`` and ``g`` as in :func:`group_norm_sq_norms`, N groups of ``group_size`` samples.
    """
    b, c = int(a.shape[0]), module.num_channels
    n = groups_of(b, group_size)
    a_hat = F.group_norm(a, module.num_groups, eps=module.eps).reshape(b, c, -1)
    gm = g.reshape(b, c, -1)
    total = torch.zeros(n, dtype=torch.float64, device=a.device)
    if module.weight is not None:
        total = total + row_sq_sums((a_hat * gm).sum(dim=2).reshape(n, group_size, c).sum(1))
    if module.bias is not None:
        total = total + row_sq_sums(gm.sum(dim=2).reshape(n, group_size, c).sum(dim=1))
    return total
