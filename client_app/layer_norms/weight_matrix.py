"""Sums of squares shared by the layer formulas: rows, the Gram route, weight gradients, chunks."""

from __future__ import annotations

import torch

#: Upper bound on the per-sample intermediate floats one layer holds at once (64 Mi floats =
#: 256 MB); the samples of a layer are processed in chunks that fit it.
CHUNK_BUDGET_FLOATS = 64 * 1024 * 1024


def row_sq_sums(x: torch.Tensor) -> torch.Tensor:
    """Sum of squares of each row ``x[i]`` as float64, shape [x.shape[0]].

    Summed in ``x``'s dtype by torch's cascade summation (~1e-7 relative in float32; a float64
    reduction of float32 casts first and is ~10x slower on a CPU), returned in float64.
    """
    return x.reshape(int(x.shape[0]), -1).square().sum(dim=1).double()


def gram_sq_norms(u: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Return ||G_i U_i^T||_F^2 = sum_{t,t'} (u_it . u_it') (g_it . g_it') without G_i U_i^T.

    From the two T x T Gram matrices of ``u`` [b, K, T] and ``g`` [b, O, T] (~ T^2 (K + O)
    multiply-adds per sample), summed in float64; returns float64 [b].
    """
    uu = torch.bmm(u.transpose(1, 2), u).double()
    gg = torch.bmm(g.transpose(1, 2), g).double()
    return (uu * gg).sum(dim=(1, 2))


def weight_sq_norms(
    u: torch.Tensor, g: torch.Tensor, *, chunk_size: int | None = None
) -> torch.Tensor:
    """Per-sample weight-gradient norms ||G_i U_i^T||_F^2 (float64 [b]) of a Linear at T positions.

    ``u`` [b, K, T] are the inputs, ``g`` [b, O, T] the output gradients. T = 1: ||u||^2 ||g||^2;
    otherwise the Gram route when cheaper than forming G U^T (~ T K O); ``chunk_size`` samples per
    chunk (default: as many as fit :data:`CHUNK_BUDGET_FLOATS`).
    """
    b, k, t = (int(s) for s in u.shape)
    o = int(g.shape[1])
    if int(g.shape[0]) != b or int(g.shape[2]) != t:
        raise ValueError(f"u {tuple(u.shape)} and g {tuple(g.shape)} do not match")
    if t == 1:
        return row_sq_sums(u) * row_sq_sums(g)
    use_gram = gram_is_cheaper(t, k, o)
    chunk = chunk_length(2 * t * t if use_gram else o * k, chunk_size)
    parts = []
    for start in range(0, b, chunk):
        uc, gc = u[start : start + chunk], g[start : start + chunk]
        if use_gram:
            parts.append(gram_sq_norms(uc, gc))
        else:
            gw = torch.bmm(gc, uc.transpose(1, 2))
            parts.append(row_sq_sums(gw))
    return torch.cat(parts)


def groups_of(n: int, group_size: int) -> int:
    """Number of groups N of ``group_size`` consecutive samples in a batch of ``n`` (checked)."""
    if group_size < 1 or n % group_size:
        raise ValueError(
            f"a batch of {n} samples does not split into groups of {group_size} (need a "
            "positive group size that divides the batch)"
        )
    return n // group_size


def chunk_length(per_sample_floats: int, chunk_size: int | None) -> int:
    """Samples per chunk: ``chunk_size`` if given, else as many as fit the float budget."""
    if chunk_size is not None:
        return chunk_size
    return max(1, CHUNK_BUDGET_FLOATS // max(per_sample_floats, 1))


def gram_is_cheaper(t: int, k: int, o: int) -> bool:
    """Whether T^2 (K + O + 1) multiply-adds (Gram route) undercut T K O + K O (forming)."""
    return t * t * (k + o + 1) < t * k * o + k * o
