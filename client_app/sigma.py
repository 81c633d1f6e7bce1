"""sigma-hat_v: the spread of per-sample gradients on a device's first mini-batch.

Paper eq. (local_est_sigma):

    sigma-hat_v = sqrt( (1/b) sum_i || grad l_i(w) - (1/b) sum_i' grad l_i'(w) ||^2 ),

with l_i the cross-entropy of sample i of the first batch and w the received global model; the
norm runs over all model parameters. Per-sample gradients come from :mod:`torch.func`
(``functional_call`` + ``vmap`` + ``grad``), not from a Python loop over samples. The model is
evaluated in eval mode, so dropout is off and sigma-hat measures the data spread only, not
dropout noise (GroupNorm and the other layers act per sample, so eval mode changes nothing
else).

Memory: a batch of per-sample gradients holds b times the model size (ResNet-18, b = 32:
1.4 GB), so the batch is processed in chunks whose gradients fit :data:`CHUNK_BUDGET_FLOATS`,
and the chunks' means and sums of squared deviations are combined exactly (Chan et al.'s
pairwise update), in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F  # noqa: N812 (torch convention)

#: Upper bound on the per-sample gradient floats held at once (64 Mi floats = 256 MB).
CHUNK_BUDGET_FLOATS = 64 * 1024 * 1024


@dataclass(frozen=True)
class GradientSpread:
    """Result of :func:`gradient_spread`.

    Attributes
    ----------
    sigma : float
        sigma-hat_v of paper eq. (local_est_sigma), in loss units per parameter unit.
    mean_loss : float
        Mean cross-entropy of the batch at the given model (eval mode), nats.
    batch_size : int
        b, the number of samples used.

    """

    sigma: float
    mean_loss: float
    batch_size: int


def gradient_spread(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    chunk_size: int | None = None,
) -> GradientSpread:
    """Compute sigma-hat_v (paper eq. (local_est_sigma)) and the batch loss at ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        The received global model; left unchanged (its train/eval mode is restored).
    x : torch.Tensor of float32, shape [b, C, H, W]
        The first mini-batch (moved to the model's device).
    y : torch.Tensor of int64, shape [b]
        Its labels.
    chunk_size : int, optional
        Samples per vmap call; default: as many as fit :data:`CHUNK_BUDGET_FLOATS`.

    Returns
    -------
    GradientSpread
        sigma-hat_v >= 0, the mean loss and b.

    """
    b = int(y.shape[0])
    if b < 1 or int(x.shape[0]) != b:
        raise ValueError(
            f"x and y must hold the same number (>= 1) of samples; got {x.shape[0]} and {b}"
        )
    params = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: t.detach() for name, t in model.named_buffers()}
    num_params = sum(p.numel() for p in params.values())
    if chunk_size is None:
        chunk_size = max(1, CHUNK_BUDGET_FLOATS // max(num_params, 1))
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1; got {chunk_size}")
    device = next(iter(params.values())).device

    def sample_loss(
        p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        loss = F.cross_entropy(logits, yi.unsqueeze(0))
        return loss, loss.detach()

    per_sample = vmap(grad(sample_loss, has_aux=True), in_dims=(None, 0, 0))

    was_training = model.training
    model.eval()
    try:
        count = 0
        mean: dict[str, torch.Tensor] = {}
        m2 = torch.zeros((), dtype=torch.float64, device=device)
        loss_sum = 0.0
        for start in range(0, b, chunk_size):
            xc = x[start : start + chunk_size].to(device)
            yc = y[start : start + chunk_size].to(device)
            grads, losses = per_sample(params, xc, yc)
            n_chunk = int(yc.shape[0])
            loss_sum += float(losses.double().sum())
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
    finally:
        model.train(was_training)
    sigma = float(torch.sqrt(torch.clamp(m2, min=0.0) / b))
    return GradientSpread(sigma=sigma, mean_loss=loss_sum / b, batch_size=b)
